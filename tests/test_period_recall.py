"""Recall by period in the owner's days, with a real multilingual model (in-process e5).

A user in Beijing told the bot a travel plan on several days; the bot's machine
runs in UTC. A question naming a period (上周, 上个月, 十月份, 昨天 at 07:30 Beijing
time, "last week") gets that period's plan first among the same-topic plans; a
memory of the period about something else does not jump ahead of the topic; a
question naming no period ranks as without the step. ``since`` / ``until`` keep only
a period's memories; an event time counts before the time a memory was said.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from tests.botproject import make_runtime
from tests.helpers import new_memory
from tests.lazy import lazy_import

K = lazy_import("amrita_plugin_memory.storage.keys")
T = lazy_import("amrita_plugin_memory.storage.scope")
CAL = lazy_import("amrita_plugin_memory.core.calendar")

BEIJING = timezone(timedelta(hours=8))
NOW = datetime(2026, 12, 4, 7, 30, tzinfo=BEIJING)  # a Friday, before 08:00 local time

PLANS = [
    (datetime(2026, 10, 14, 21, 0, tzinfo=BEIJING), "用户说周末想去杭州旅行"),
    (datetime(2026, 11, 18, 20, 0, tzinfo=BEIJING), "用户说周末想去成都旅行"),
    (datetime(2026, 11, 25, 19, 0, tzinfo=BEIJING), "用户说周末想去西安旅行"),
    (datetime(2026, 12, 3, 7, 20, tzinfo=BEIJING), "用户说周末想去厦门旅行"),  # 12-02 in UTC
]
OTHER = [
    (datetime(2026, 11, 26, 12, 0, tzinfo=BEIJING), "用户的猫叫年糕，最近有点挑食"),
    (datetime(2026, 12, 3, 7, 25, tzinfo=BEIJING), "用户在腾讯做程序员"),
]


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="seconds")


@pytest.fixture
async def rt(tmp_path: Path) -> AsyncIterator[Any]:
    runtime = make_runtime(tmp_path, embedding_proctol="local", embedding_model_name="auto")
    runtime.embedder.timeout = 60.0
    runtime.calendar = CAL.OwnerCalendar(CAL.zone_named("Asia/Shanghai"), lambda: NOW)
    runtime.store.calendar = runtime.calendar
    runtime.store.clock = lambda: _stamp(NOW)
    yield runtime
    await runtime.close()


async def _seed(rt: Any, uid: int, rows: list[tuple[datetime, str]], **extra: Any) -> None:
    part = K.user_key(str(uid))
    for when, text in rows:
        rt.store.clock = lambda w=when: _stamp(w)
        await rt.store.add(dataclasses.replace(new_memory(part, "user", text), **extra))
    rt.store.clock = lambda: _stamp(NOW)


def _caller(uid: int) -> Any:
    return T.ScopeRules().of_chat(K.target_from_ids(uid))


async def _read(rt: Any, uid: int, query: str, k: int = 6, **args: Any) -> list[str]:
    result = await rt.tools.read_memory(_caller(uid), {"query": query, "top_k": k, **args})
    assert result["ok"], result
    return [m["content"] for m in result["memories"]]


def _plans(found: list[str]) -> list[str]:
    return [text for text in found if "旅行" in text]


async def test_the_named_periods_plan_comes_first_among_the_plans(rt: Any) -> None:
    await _seed(rt, 61001, PLANS + OTHER)
    hangzhou, chengdu, xian, xiamen = (text for _, text in PLANS)
    assert _plans(await _read(rt, 61001, "上周我说想去哪里旅行来着？"))[0] == xian
    last_month = _plans(await _read(rt, 61001, "上个月我说想去哪里旅行？"))
    assert set(last_month[:2]) == {chengdu, xian}
    assert _plans(await _read(rt, 61001, "十月份我提过去哪里旅行吗"))[0] == hangzhou
    # Said at 07:20 Beijing time on 12-03: "yesterday" to a question at 07:30 on 12-04.
    assert _plans(await _read(rt, 61001, "昨天我说想去哪里旅行"))[0] == xiamen
    assert (
        _plans(await _read(rt, 61001, "Where did I say I wanted to travel last week?"))[0] == xian
    )


async def test_a_question_naming_no_period_loses_nothing_by_age(rt: Any) -> None:
    await _seed(rt, 61002, PLANS + OTHER)
    found = await _read(rt, 61002, "我说过想去哪些地方旅行？", k=4)
    assert set(found) == {text for _, text in PLANS}
    without = dataclasses.replace(rt.store.settings, time_weight=0.0)
    with_step = await _read(rt, 61002, "我说过想去哪些地方旅行？")
    rt.store.settings = without
    assert await _read(rt, 61002, "我说过想去哪些地方旅行？") == with_step


async def test_a_memory_of_the_period_on_another_topic_does_not_jump_ahead(rt: Any) -> None:
    await _seed(rt, 61003, PLANS + OTHER)
    found = await _read(rt, 61003, "上周我说想去哪里旅行来着？")
    assert found.index("用户的猫叫年糕，最近有点挑食") > found.index(PLANS[2][1])
    assert found.index("用户的猫叫年糕，最近有点挑食") > 0
    # Yesterday's job fact is of the period, but the question is about travel.
    found = await _read(rt, 61003, "昨天我说想去哪里旅行")
    assert found[0] == PLANS[3][1]


async def test_since_and_until_keep_only_that_periods_memories(rt: Any) -> None:
    await _seed(rt, 61004, PLANS + OTHER)
    found = await _read(rt, 61004, "旅行", since="2026-11-01", until="2026-11-30")
    assert set(found) == {PLANS[1][1], PLANS[2][1], OTHER[0][1]}
    assert set(await _read(rt, 61004, "旅行", since="2026-12-03")) == {PLANS[3][1], OTHER[1][1]}
    args = {"limit": 10, "since": "2026-11", "until": "2026-11"}
    listed = await rt.tools.list_memory(_caller(61004), args)
    assert listed["ok"] and listed["total"] == 3
    assert [m["content"] for m in listed["memories"]] == [PLANS[1][1], PLANS[2][1], OTHER[0][1]]
    later = await rt.tools.list_memory(_caller(61004), {"limit": 10, "since": "2026-11-26"})
    assert [m["content"] for m in later["memories"]] == [OTHER[0][1], PLANS[3][1], OTHER[1][1]]
    # Beijing days: 07:20 on 12-03 is 12-03, not the UTC day 12-02.
    day = await rt.tools.list_memory(
        _caller(61004), {"limit": 10, "since": "2026-12-02", "until": "2026-12-02"}
    )
    assert day["total"] == 0


async def test_an_event_time_counts_before_the_time_it_was_said(rt: Any) -> None:
    part = K.user_key("61005")
    said = datetime(2026, 12, 1, 20, 0, tzinfo=BEIJING)
    rt.store.clock = lambda: _stamp(said)
    await rt.store.add(
        dataclasses.replace(
            new_memory(part, "user", "用户2026-11-20去医院做了体检"), event_time="2026-11-20"
        )
    )
    await rt.store.add(new_memory(part, "user", "用户说下周要去医院复查"))
    rt.store.clock = lambda: _stamp(NOW)
    listed = await rt.tools.list_memory(
        _caller(61005), {"limit": 10, "since": "2026-11-16", "until": "2026-11-22"}
    )
    assert [m["content"] for m in listed["memories"]] == ["用户2026-11-20去医院做了体检"]
    assert listed["memories"][0]["event_time"] == "2026-11-20"
    this_week = await rt.tools.list_memory(_caller(61005), {"limit": 10, "since": "2026-11-30"})
    assert [m["content"] for m in this_week["memories"]] == ["用户说下周要去医院复查"]


@pytest.mark.parametrize(
    "args, error",
    [
        ({"since": "上周"}, "since"),
        ({"until": 20261201}, "until"),
        ({"since": "2026-13-01"}, "since"),
        ({"since": "2026-12-05", "until": "2026-12-01"}, "晚于"),
        ({"since": "x" * 500}, "since"),
    ],
)
async def test_hostile_dates_are_refused_and_change_nothing(
    rt: Any, args: dict[str, Any], error: str
) -> None:
    for tool in (rt.tools.read_memory, rt.tools.list_memory):
        result = await tool(_caller(61006), {"query": "旅行", "limit": 5, **args})
        assert result["ok"] is False and error in result["error"], result
    bad = await rt.tools.write_memory(
        _caller(61006), {"content": "用户去了医院", "tags": ["健康"], "event_date": "昨天"}
    )
    assert bad["ok"] is False and "event_date" in bad["error"]
    assert (await rt.tools.list_memory(_caller(61006), {"limit": 5}))["total"] == 0


def _rec(text: str, day: str = "2026-11-25T11:00:00+00:00") -> Any:
    return dataclasses.replace(new_memory("p", "user", text).record("id-" + text, day))


def test_passing_floors_by_script_and_period() -> None:
    R = lazy_import("amrita_plugin_memory.active.recall")
    cat, job, hike = _rec("用户的猫叫年糕"), _rec("用户在腾讯做程序员"), _rec("I love hiking")
    never = lambda record: False  # noqa: E731
    # An English question, Chinese memories: shown when they stand out from plain
    # Chinese memories (baseline 0.73 here), whatever the English floor says.
    shown = R.passing(
        "What is my cat called?",
        [(cat, 0.80), (job, 0.76), (hike, 0.83)],
        floor=0.82,
        lift=0.045,
        baselines={True: 0.73},
        of_period=never,
    )
    assert [r.content for r, _ in shown] == ["用户的猫叫年糕", "I love hiking"]
    # No baseline known (the anchors could not be embedded): no cross-script memory.
    assert (
        R.passing("my cat?", [(cat, 0.9)], floor=0.82, lift=0.045, baselines={}, of_period=never)
        == []
    )
    # Same script: the message's own floor; a memory of the named period a little lower.
    args = {"floor": 0.87, "lift": 0.045, "baselines": {}}
    assert R.passing("上周我说过什么", [(job, 0.85)], **args, of_period=never) == []
    shown = R.passing("上周我说过什么", [(job, 0.85)], **args, of_period=lambda r: True)
    assert [r.content for r, _ in shown] == ["用户在腾讯做程序员"]


async def test_active_recall_finds_chinese_memories_for_an_english_question(rt: Any) -> None:
    await _seed(rt, 61007, PLANS + OTHER)
    R = lazy_import("amrita_plugin_memory.active.recall")
    recall = R.MemoryRecall(
        rt.store,
        top_k=3,
        max_chars=600,
        min_similarity=0.87,
        min_similarity_non_cjk=0.82,
        calendar=rt.calendar,
    )  # the defaults of [active_memory]
    scope = T.ScopeRules().of_chat(K.target_from_ids(61007))
    found = [
        r.content
        for r, _ in await recall.recall(scope, "Where did I say I wanted to travel last week?")
    ]
    assert found and found[0] == PLANS[2][1]
    assert "用户在腾讯做程序员" not in found
    cat = [r.content for r, _ in await recall.recall(scope, "What is my cat called?")]
    assert cat == ["用户的猫叫年糕，最近有点挑食"]
    for chatter in ["hello there", "thanks!", "lol that's funny", "I'm bored"]:
        assert await recall.recall(scope, chatter) == [], chatter
