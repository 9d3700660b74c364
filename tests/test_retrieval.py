"""Ranking (keyword channel, age decay) and merging repeated writes, with a real model.

The default ranking is plain: vector channel, keyword channel, age decay. No
rule moves "an update" first (issue #23); the cases that such rules got wrong
are in ``test_merge_repeats.py`` (merging) and below (ranking).

The embedder is the bundled multilingual-e5-small (``EMBEDDING_PROCTOL=local``),
in-process: real vectors for Chinese text, no service to start.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.botproject import make_runtime
from tests.helpers import LoopStalls, new_memory, view_of
from tests.lazy import lazy_import
from tests.reliability_stats import STATS

R = lazy_import("amrita_plugin_memory.ranking.keywords", "amrita_plugin_memory.ranking.scores")
D = lazy_import("amrita_plugin_memory.ranking.repeats")
K = lazy_import("amrita_plugin_memory.storage.keys")
T = lazy_import("amrita_plugin_memory.tools.memory_tools", "amrita_plugin_memory.storage.scope")

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)

FACTS = [
    "用户的游戏账号是A1037",
    "用户的另一个游戏账号是B2210",
    "用户住在1602房间",
    "用户公司的工位号是1620",
    "用户养了一只叫年糕的布偶猫",
    "用户的狗叫汤圆，是一只柯基",
    "用户喜欢吃火锅，尤其是牛油锅底",
    "用户在深圳一家游戏公司做后端开发",
    "用户的生日是三月五日",
    "用户每周六下午去打羽毛球",
    "用户的车牌号是粤B3K772",
    "User's favourite band is Mayday",
]


@pytest.fixture
async def rt(tmp_path: Path) -> AsyncIterator[Any]:
    runtime = make_runtime(tmp_path, embedding_proctol="local", embedding_model_name="auto")
    runtime.embedder.timeout = 60.0
    runtime.store.clock = lambda: NOW.isoformat(timespec="seconds")
    yield runtime
    await runtime.close()


def at(days_ago: float) -> Callable[[], str]:
    return lambda: (NOW - timedelta(days=days_ago)).isoformat(timespec="seconds")


def settings(rt: Any, **changes: Any) -> None:
    rt.store.settings = dataclasses.replace(rt.store.settings, **changes)


def caller(uid: int = 10001, gid: int | None = None) -> Any:
    return T.ScopeRules().of_chat(K.target_from_ids(uid, gid))


async def write(rt: Any, text: str, **args: Any) -> dict[str, Any]:
    result = await rt.tools.write_memory(caller(), {"content": text, "tags": ["t"], **args})
    assert result["ok"], result
    return result


async def top(rt: Any, query: str, k: int = 5, uid: int = 10001) -> list[str]:
    result = await rt.tools.read_memory(caller(uid), {"query": query, "top_k": k})
    assert result["ok"], result
    return [m["content"] for m in result["memories"]]


# -- tokens and arithmetic ----------------------------------------------------------------


def test_tokens_keep_numbers_codes_and_chinese_words() -> None:
    tokens = R.tokenize("房间号１６０２，A1037 的年糕 and the Cat")
    assert {"1602", "a1037", "年糕", "房间", "cat"} <= set(tokens)
    assert "the" not in tokens and "and" not in tokens
    assert R.tokenize("") == [] and R.tokenize("，。!!") == []


def test_keyword_terms_stem_english_words_only() -> None:
    assert R.keyword_terms("Ana painted lighthouses") == ["ana", "paint", "lighthous"]
    assert R.keyword_terms("A1037 房间1602") == ["a1037", "1602", "房间", "间1602"]
    assert R.tokenize("painted") == ["painted"]  # dedup compares values unstemmed
    index = R.KeywordIndex(["Ana painted a lighthouse in 2021", "Ana went fishing"])
    assert index.coverage("When did Ana paint the lighthouse?")[0] == pytest.approx(1.0)


def test_a_cjk_term_counts_part_of_a_word_in_the_ranking() -> None:
    index = R.KeywordIndex(["用户的猫叫年糕", "用户的狗叫饺子", "The cat is called Mochi"])
    assert index.coverage("年糕") == {0: pytest.approx(1.0)}
    assert index.coverage("年糕", cjk_unit=R.CJK_UNIT) == {0: pytest.approx(R.CJK_UNIT)}
    assert index.coverage("Mochi", cjk_unit=R.CJK_UNIT) == {2: pytest.approx(1.0)}


def test_fusion_and_decay_arithmetic() -> None:
    # The keyword share decides between close candidates, not against a clearly closer one.
    assert R.combine({"a": 0.20, "b": 0.21}, {"b": 1.0}, 0.1) == ["b", "a"]
    assert R.combine({"a": 0.20, "b": 0.30}, {"b": 1.0}, 0.1) == ["a", "b"]
    assert R.combine({"a": 0.20, "b": 0.21}, {"b": 0.2}, 0.1) == ["a", "b"]
    assert R.combine({"a": 0.2, "b": None}, {}, 0.1) == ["a", "b"]
    index = R.KeywordIndex(["用户的账号是A1037", "用户喜欢猫", "用户喜欢狗"])
    share = index.coverage("A1037 是什么来着")
    assert share == {0: pytest.approx(1.0)}  # the question's own words are in no memory
    assert R.decay_factor(90, 90) == pytest.approx(0.5)
    assert R.decay_factor(1000, 0) == 1.0  # never ages
    assert R.decayed_distance(0.30, 0.0, 0.1) == pytest.approx(0.33)
    assert R.age_days("not a date", NOW) == 0.0


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("用户喜欢喝咖啡", "用户很喜欢喝咖啡。", True),
        ("用户的猫叫年糕", "用户的猫叫年糕呀", True),
        ("用户的游戏ID是A1037", "用户的游戏 ID 是 Ａ１０３７！", True),
        ("The user likes hiking", "The user really likes hiking.", True),
        ("用户的猫叫年糕", "用户养的猫叫年糕", False),  # other words: the extraction's job
        ("用户住在越秀区", "用户住在天河区", False),
        ("我的猫叫年糕", "我的猫叫汤圆", False),
        ("用户的房间号是1602", "用户的房间号是1603", False),
        ("用户喜欢吃火锅", "用户不喜欢吃火锅", False),
        ("用户喝咖啡不加糖", "用户喝咖啡不加糖也不加奶", False),
        ("用户养了两只猫", "用户养了三只猫", False),
        ("用户的哥哥在腾讯工作", "用户在腾讯工作", False),
        ("用户欠我500块", "我欠用户500块", False),
        ("用户的妻子是老师", "用户的前妻是老师", False),
        ("用户想学日语", "用户在学日语", False),
        ("用户恐怕要搬去天河区了", "用户要搬去天河区了", False),
        ("用户还没定要不要搬家", "用户定了要搬家", False),
        ("User lives in Guangzhou", "User lives in Shenzhen", False),
        ("The user's brother works at Tencent", "The user works at Tencent", False),
    ],
)
def test_a_true_repeat_says_the_same_in_nearly_the_same_words(a: str, b: str, same: bool) -> None:
    assert D.is_repeat(a, b) is same
    assert D.is_repeat(b, a) is same


# -- the keyword channel ----------------------------------------------------------------


CODES = [
    "用户的游戏账号是A1073",
    "用户的旧账号是A1307",
    "用户同学的账号是A1037",
    "用户的快递取件码是1037",
    "用户的工号是A0137",
    "用户的QQ小号是B1037",
]


async def test_exact_tokens_come_first(rt: Any) -> None:
    for fact in FACTS:
        await rt.store.add(new_memory(K.user_key("10001"), "user", fact))
    for query, expected in [
        ("A1037", "用户的游戏账号是A1037"),
        ("B2210", "用户的另一个游戏账号是B2210"),
        ("1602", "用户住在1602房间"),
        ("1620 是什么号码来着", "用户公司的工位号是1620"),
        ("年糕", "用户养了一只叫年糕的布偶猫"),
        ("粤B3K772 是谁的车", "用户的车牌号是粤B3K772"),
    ]:
        assert (await top(rt, query))[0] == expected, query
    # Codes that a vector model confuses: the whole token decides.
    for fact in CODES:
        await rt.store.add(new_memory(K.user_key("10001"), "user", fact))
    settings(rt, hybrid=False)
    assert (await top(rt, "1037"))[0] != "用户的快递取件码是1037"  # vectors alone miss it
    settings(rt, hybrid=True)
    assert (await top(rt, "1037"))[0] == "用户的快递取件码是1037"


async def test_keyword_channel_keeps_partition_and_filters(rt: Any) -> None:
    """A keyword match in another partition, or one a filter excludes, is never returned."""
    me, other = K.user_key("10001"), K.user_key("10002")
    await rt.store.add(new_memory(other, "user", "用户的门禁卡号是Z9981"))
    await rt.store.add(new_memory(me, "user", "用户的门禁卡号是Z1234", importance="low"))
    await rt.store.add(new_memory(me, "user", "用户喜欢喝乌龙茶", importance="high"))
    assert "Z9981" not in "".join(await top(rt, "Z9981"))
    assert await top(rt, "Z9981", uid=10002) == ["用户的门禁卡号是Z9981"]
    hits = await rt.store.query(view_of(me), "Z1234", importance="high")
    assert [h.content for h in hits] == ["用户喜欢喝乌龙茶"]
    # Group chat: the speaker's private memories stay out, keyword match or not.
    gid = 5555
    in_group = await rt.tools.read_memory(caller(10001, gid), {"query": "Z1234"})
    assert in_group["ok"] and in_group["memories"] == []
    STATS.inputs_tried += 3


async def test_keyword_channel_without_the_index(rt: Any) -> None:
    """With the partition index off (``vector_index_max_mb = 0``) Chroma supplies the rows."""
    rt.store.index.max_bytes = 0
    for fact in FACTS:
        await rt.store.add(new_memory(K.user_key("10001"), "user", fact))
    assert (await top(rt, "B2210"))[0] == "用户的另一个游戏账号是B2210"
    assert len(rt.store.index) == 0


# -- age ------------------------------------------------------------------------------------


async def _old_then_new(rt: Any, uid: int, old: str, new: str) -> None:
    part = K.user_key(str(uid))
    rt.store.clock = at(120)
    await rt.store.add(new_memory(part, "user", old))
    rt.store.clock = at(1)
    await rt.store.add(new_memory(part, "user", new))
    rt.store.clock = at(0)


async def test_a_clearly_better_old_match_still_wins(rt: Any) -> None:
    # Age decay (off by default, switched on here) only breaks near ties: a newer memory
    # on another subject does not displace it.
    settings(rt, decay=True)
    await _old_then_new(rt, 30001, "用户的生日是三月五日", "用户昨天去看了五月天的演唱会")
    assert (await top(rt, "用户的生日是哪天", uid=30001))[0] == "用户的生日是三月五日"
    await _old_then_new(rt, 30002, "用户的生日是三月五日", "用户昨天过了生日，收到了一个蛋糕")
    assert (await top(rt, "用户的生日是哪天", uid=30002))[0] == "用户的生日是三月五日"


async def test_high_importance_never_ages(rt: Any) -> None:
    settings(rt, decay=True, half_lives={"low": 7.0, "medium": 90.0, "high": 0.0})
    record = dataclasses.replace(
        (await rt.store.add(new_memory(K.user_key("10001"), "user", "x", importance="high"))),
        updated_at=at(10_000)(),
    )
    assert rt.store.settings.growth(record, NOW) == 1.0
    low = dataclasses.replace(record, importance="low")
    weight = rt.store.settings.decay_weight
    assert rt.store.settings.growth(low, NOW) == pytest.approx(1 + weight, abs=1e-6)


# -- merging repeated writes --------------------------------------------------------------


async def test_a_repeated_fact_is_merged_not_copied(rt: Any) -> None:
    me = K.user_key("10001")
    first = await write(rt, "用户喜欢喝咖啡", tags=["饮食"], importance="low")
    rt.store.clock = at(-1)  # a day later
    again = await write(rt, "用户很喜欢喝咖啡。", tags=["咖啡"], importance="high")
    assert again["merged"] is True and "merged" not in first
    assert again["memory"]["id"] == first["memory"]["id"]
    [stored] = await rt.store.list(view_of(me))
    assert stored.content == "用户很喜欢喝咖啡。"  # the newer text
    assert stored.tags == ["饮食", "咖啡"] and stored.importance == "high"
    assert stored.updated_at == at(-1)() and stored.created_at == NOW.isoformat(timespec="seconds")
    # The older text is kept in the archive as the memory's history.
    history = await rt.store.archive.list(view_of(me))
    assert [(h.record.content, h.reason, h.memory_id) for h in history] == [
        ("用户喜欢喝咖啡", "merged", first["memory"]["id"])
    ]
    assert (await top(rt, "咖啡"))[0] == "用户很喜欢喝咖啡。"


async def test_different_values_are_not_merged(rt: Any) -> None:
    me = K.user_key("10001")
    for text in ("用户住在越秀区", "用户住在天河区", "用户的房间号是1602", "用户的房间号是1603",
                 "用户喜欢吃火锅", "用户不喜欢吃火锅"):  # fmt: skip
        assert "merged" not in await write(rt, text)
    assert await rt.store.count(view_of(me)) == 6


async def test_a_merge_is_accepted_by_a_full_partition_and_keeps_scopes_apart(rt: Any) -> None:
    rt.tools.memory_limit = 2
    await write(rt, "用户的狗叫汤圆")
    await write(rt, "用户喜欢爬山")
    assert (await write(rt, "用户的狗叫汤圆。"))["merged"] is True
    refused = await rt.tools.write_memory(caller(), {"content": "用户会弹吉他", "tags": ["t"]})
    assert refused["ok"] is False
    # The same text as a group memory is another scope/partition: never merged with a personal one.
    group = await rt.tools.write_memory(
        caller(10001, 777), {"content": "用户的狗叫汤圆", "tags": ["t"], "scope": "group"}
    )
    assert group["ok"] and "merged" not in group


async def test_merging_can_be_switched_off(rt: Any) -> None:
    settings(rt, dedup=False)
    await write(rt, "用户的猫叫年糕")
    assert "merged" not in await write(rt, "用户的猫叫年糕")
    assert await rt.store.count(view_of(K.user_key("10001"))) == 2


async def test_a_failed_history_write_changes_nothing(rt: Any) -> None:
    """The archive is written before the live memory: if it fails, the merge does not happen."""
    me = K.user_key("10001")
    await write(rt, "用户的猫叫年糕")

    async def broken(*_: Any, **__: Any) -> None:
        raise OSError("disk full")

    rt.store.archive.save_version = broken
    STATS.faults_injected += 1
    result = await rt.tools.write_memory(caller(), {"content": "用户的猫叫年糕呀", "tags": ["t"]})
    assert result["ok"] is False
    [stored] = await rt.store.list(view_of(me))
    if stored.content != "用户的猫叫年糕":
        STATS.items_lost += 1
    assert stored.content == "用户的猫叫年糕"


# -- plain ranking ------------------------------------------------------------------------


def test_contractions_are_not_keywords() -> None:
    assert "s" not in R.tokenize("The user's phone")
    assert R.tokenize("The user's phone") == ["user", "phone"]


PHONES = [
    (120, "用户的手机尾号是3037"),
    (60, "用户妈妈的手机尾号是1736"),  # someone else's: never the update of the user's
    (5, "用户换了手机号，新号码尾号是3923"),
    (30, "用户的室友叫徐明轩，是做程序员的"),
]


async def _write_phones(rt: Any, uid: int) -> None:
    """:data:`PHONES` into the partition of ``uid``, each as many days ago as it says."""
    part = K.user_key(str(uid))
    for days, text in PHONES:
        rt.store.clock = at(days)
        await rt.store.add(new_memory(part, "user", text))
    rt.store.clock = at(0)


async def test_a_fact_about_someone_else_answers_a_question_about_them(rt: Any) -> None:
    """Plain ranking: the mother's memory answers a question about her mother."""
    await _write_phones(rt, 40002)
    got = await top(rt, "我妈的手机尾号是多少", uid=40002)
    assert got[0] == "用户妈妈的手机尾号是1736", got


async def test_a_large_partition_is_indexed_off_the_event_loop(rt: Any) -> None:
    """The keyword index of a 6,000-memory partition (~0.25 s of tokenising) is built
    in a worker thread, and the partition is read in pages: the loop keeps ticking."""
    import random
    import uuid

    from amrita_plugin_memory.storage.partition import keyword_channel

    part = K.user_key("60001")
    col = await rt.store.collection()
    rng = random.Random(6)
    n = 6000
    assert n > keyword_channel.INLINE_KEYWORD_ROWS
    for start in range(0, n, 1000):
        rows = range(start, start + 1000)
        await rt.connection.run(
            col.add,
            ids=[uuid.uuid4().hex for _ in rows],
            embeddings=[[rng.gauss(0, 1) for _ in range(384)] for _ in rows],
            documents=[f"用户第{k}次说起公司楼下新开的奶茶店，排队的人很多" for k in rows],
            metadatas=[
                {"user_id": part, "scope": "user", "importance": "medium", "tags": "t",
                 "created_at": NOW.isoformat(), "updated_at": NOW.isoformat()}
                for _ in rows
            ],
        )  # fmt: skip
    async with LoopStalls() as stalls:  # what this process did, not a loaded machine
        got = await top(rt, "公司楼下的奶茶店", uid=60001)
    assert len(got) == 5 and all("奶茶店" in text for text in got)
    assert rt.store.index.loads >= 1
    assert stalls.worst < 0.1, sorted(stalls.stalls)[-5:]
