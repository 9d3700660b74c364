"""The ranking per language and for questions that name a time, with a real model.

A question's script picks its channels (a Chinese question's CJK bigrams do not
count in the keyword channel; its ASCII codes do); a question naming a day
("3月5号", "on 7 July, 2023", "我们第一次聊天") prefers what was written that
day; a question naming no time ranks as before. Age decay is off by default,
so a newer memory about someone else never wins a near tie.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.botproject import make_runtime
from tests.helpers import new_memory
from tests.lazy import lazy_import

W = lazy_import("amrita_plugin_memory.ranking.when")
K = lazy_import("amrita_plugin_memory.storage.keys")
T = lazy_import("amrita_plugin_memory.tools.memory_tools", "amrita_plugin_memory.storage.scope")
S = lazy_import("amrita_plugin_memory.storage.partition.retrieval")
C = lazy_import("amrita_plugin_memory.core.config")

NOW = datetime(2024, 3, 8, 12, 0, tzinfo=UTC)


def test_named_periods_in_chinese_and_english() -> None:
    def day(text: str) -> Any:
        return W.named_period(text, NOW)

    def days(first: date, last: date | None = None) -> Any:
        return W.Period.of_days(first, last or first, UTC)

    march5 = days(date(2024, 3, 5))
    assert day("在3月5号我做了什么菜？") == march5
    assert day("我3月5日那天心情怎么样") == march5
    assert day("2024年3月5日我说了什么") == march5
    assert day("12月25日我在干嘛") == days(date(2023, 12, 25))  # not ahead
    assert day("昨天我吃了什么") == days(date(2024, 3, 7))
    assert day("你还记得我们第一次对话的时候聊了什么吗") == W.FIRST_CHAT
    assert day("What did Maria do on 7 July, 2023?") == days(date(2023, 7, 7))
    assert day("Which book on 8th December, 2023?") == days(date(2023, 12, 8))
    assert day("What did she paint on October 13, 2023?") == days(date(2023, 10, 13))
    assert day("What class did she start in December 2023?") == days(
        date(2023, 12, 1), date(2023, 12, 31)
    )
    # Relative spans and a month without a year are recognised now (tests/test_periods.py
    # has the full table): the week before this one, the latest June not in the future.
    assert day("上周我去了哪里") == days(date(2024, 2, 26), date(2024, 3, 3))
    assert day("What did she do last week?") == days(date(2024, 2, 26), date(2024, 3, 3))
    assert day("When did Melanie go camping in June?") == days(date(2023, 6, 1), date(2023, 6, 30))
    # No time named, a future one, or no such day: nothing.
    for text in [
        "我的狗叫什么名字？",
        "我曾看过《银河补习班》，那一天的具体日期是？",
        "May I ask what my cat is called?",
        "下周我要去哪里",
        "2月30号",
    ]:
        assert day(text) is None, text


def test_the_query_script_picks_the_channels() -> None:
    settings = S.RetrievalSettings()
    assert settings.script("年糕是谁").cjk_unit == 0.0
    assert settings.script("A1037 那个是什么来着").cjk_unit == 0.0  # ASCII still counts 1
    assert settings.script("What is Mochi?").cjk_unit > 0
    assert settings.decay is False and C.DecayConfig().enabled is False


@pytest.fixture
async def rt(tmp_path: Path) -> AsyncIterator[Any]:
    runtime = make_runtime(tmp_path, embedding_proctol="local", embedding_model_name="auto")
    runtime.embedder.timeout = 60.0
    runtime.store.clock = lambda: NOW.isoformat(timespec="seconds")
    yield runtime
    await runtime.close()


async def _write_days(rt: Any, uid: int, days: list[tuple[datetime, str]]) -> None:
    part = K.user_key(str(uid))
    for when, text in days:
        rt.store.clock = lambda w=when: w.isoformat(timespec="seconds")
        await rt.store.add(new_memory(part, "user", text))
    rt.store.clock = lambda: NOW.isoformat(timespec="seconds")


async def _top(rt: Any, uid: int, query: str, k: int = 3) -> list[str]:
    caller = T.ScopeRules().of_chat(K.target_from_ids(uid))
    result = await rt.tools.read_memory(caller, {"query": query, "top_k": k})
    assert result["ok"], result
    return [m["content"] for m in result["memories"]]


def _at(day: int, hour: int = 20) -> datetime:
    return datetime(2024, 3, day, hour, 0, tzinfo=UTC)


COOKING = [
    (_at(2), "你好，我叫小林，在杭州开了一家咖啡馆。"),
    (_at(3), "晚上我做了一道红烧肉，味道还不错。"),
    (_at(4), "今天我去西湖边跑了十公里。"),
    (_at(5), "我今天学着做了糖醋鱼，第一次做有点咸。"),
    (_at(6), "晚上我做了一道麻婆豆腐。"),
]


async def test_a_question_naming_a_day_prefers_that_days_memories(rt: Any) -> None:
    await _write_days(rt, 50001, COOKING)
    assert (await _top(rt, 50001, "3月5号我做了什么菜？"))[0] == COOKING[3][1]
    assert (await _top(rt, 50001, "3月3号那天晚上我做了什么菜？"))[0] == COOKING[1][1]
    first = await _top(rt, 50001, "我们第一次聊天的时候，我跟你说了什么？")
    assert first[0] == COOKING[0][1]


async def test_a_question_naming_no_time_ranks_as_without_the_step(rt: Any) -> None:
    await _write_days(rt, 50002, COOKING)
    for query in ["我做过哪些菜？", "我在哪里跑步？", "我开了什么店"]:
        with_step = await _top(rt, 50002, query, k=5)
        rt.store.settings = dataclasses.replace(rt.store.settings, time_weight=0.0)
        without = await _top(rt, 50002, query, k=5)
        rt.store.settings = dataclasses.replace(rt.store.settings, time_weight=0.2)
        assert with_step == without, query


async def test_a_newer_memory_about_someone_else_gets_no_push_from_its_age(rt: Any) -> None:
    """Near ties (the user's phone number and the mother's newer one, a phone and a newer
    phone case) are left to the vectors: the default ranks them as plain cosine does."""
    now = NOW
    await _write_days(
        rt,
        50003,
        [
            (now - timedelta(days=120), "用户的手机尾号是3037"),
            (now - timedelta(days=2), "用户妈妈的手机尾号是1736"),
            (now - timedelta(days=90), "用户的手机是华为Mate 60"),
            (now - timedelta(days=1), "用户给手机买了一个透明的手机壳"),
        ],
    )
    default = rt.store.settings
    for query in ["我的手机尾号是多少", "我用的是什么手机", "What phone do I use?"]:
        ranked = await _top(rt, 50003, query, k=4)
        rt.store.settings = dataclasses.replace(default, hybrid=False, time_weight=0.0)
        plain = await _top(rt, 50003, query, k=4)
        rt.store.settings = default
        assert ranked == plain, query


async def test_the_time_step_without_the_partition_index(rt: Any) -> None:
    """With the partition index off (``vector_index_max_mb = 0``) Chroma supplies the days."""
    rt.store.index.max_bytes = 0
    await _write_days(rt, 50004, COOKING)
    assert (await _top(rt, 50004, "3月5号我做了什么菜？"))[0] == COOKING[3][1]
    assert len(rt.store.index) == 0
