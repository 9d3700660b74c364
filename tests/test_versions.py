"""Facts that change, and what extraction learns about time.

A fact that changed is two memories linked by their writer (``replaces``), never guessed
from words: a question about now gets the newer version first, a question about before
the older one; a newer memory on the same topic that nobody linked is not an update.
Extraction shows each message's local day so the model can write absolute dates, and
its ``event`` / ``replaces`` fields are read like every other field: a bad value drops
the field or the item, never more.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from tests.botproject import make_runtime
from tests.helpers import new_memory
from tests.lazy import lazy_import

V = lazy_import("amrita_plugin_memory.ranking.versions")
OPS = lazy_import("amrita_plugin_memory.prompting.memory_ops")
X = lazy_import("amrita_plugin_memory.active.extraction", "amrita_plugin_memory.active.batches")
K = lazy_import("amrita_plugin_memory.storage.keys")
T = lazy_import("amrita_plugin_memory.storage.scope")
CAL = lazy_import("amrita_plugin_memory.core.calendar")

BEIJING = timezone(timedelta(hours=8))
NOW = datetime(2026, 12, 4, 12, 0, tzinfo=BEIJING)


@pytest.mark.parametrize(
    "ranked, tense, expected",
    [
        (["old", "x", "new"], None, ["new", "old", "x"]),
        (["old", "x", "new"], "now", ["new", "old", "x"]),
        (["new", "x", "old"], "before", ["old", "new", "x"]),
        (["new", "old"], "now", ["new", "old"]),
        (["x", "old"], "now", ["x", "old"]),  # the newer is not among them: nothing moves
        (["v1", "v3", "v2"], None, ["v3", "v2", "v1"]),  # a chain of three
        (["a", "b"], None, ["b", "a"]),  # a cycle: each once, in some order
    ],
)
def test_linked_versions_sit_side_by_side(
    ranked: list[str], tense: Any, expected: list[str]
) -> None:
    links = {
        "old": ("", "new"),
        "new": ("old", ""),
        "v1": ("", "v2"),
        "v2": ("v1", "v3"),
        "v3": ("v2", ""),
        "a": ("b", "b"),  # a cycle written by a confused writer: no recursion, nothing lost
        "b": ("a", "a"),
    }
    out = V.order_versions(ranked, links, tense)
    assert out == expected and sorted(out) == sorted(ranked)


def test_event_and_replaces_are_read_like_every_field() -> None:
    limits = OPS.OpLimits(max_ops=8, content_chars=200, tags=3, tag_chars=16)
    answer = json.dumps(
        {
            "memories": [
                {"op": "add", "content": "用户2026-12-01去了医院", "event": "2026-12-01"},
                {"op": "add", "content": "用户搬到了上海", "replaces": "M1"},
                {"op": "add", "content": "用户下个月去日本", "event": "下个月"},  # date dropped
                {"op": "add", "content": "用户又搬家了", "replaces": "M1"},  # M1 used already
                {"op": "add", "content": "用户换了工作", "replaces": "M9"},  # never shown
                {"op": "update", "ref": "M2", "content": "用户2026年12月生日", "event": "2026-12"},
            ]
        },
        ensure_ascii=False,
    )
    parsed = OPS.parse_memory_ops(answer, refs={"M1", "M2"}, limits=limits)
    got = [(o.op, o.content, o.event_time, o.replaces) for o in parsed.ops]
    assert got == [
        ("add", "用户2026-12-01去了医院", "2026-12-01", ""),
        ("add", "用户搬到了上海", "", "M1"),
        ("add", "用户下个月去日本", "", ""),
        ("update", "用户2026年12月生日", "2026-12", ""),
    ]
    assert len(parsed.ignored) == 2


def test_the_extraction_request_dates_each_message_in_the_owners_days() -> None:
    cal = CAL.OwnerCalendar(CAL.zone_named("Asia/Shanghai"), lambda: NOW)
    at = datetime(2026, 12, 2, 23, 20, tzinfo=UTC).timestamp()  # 12-03 07:20 in Beijing
    turns = [
        X.Turn("我昨天去医院了", at=at),
        X.Turn("【2026-01-01 周四】我在北京", at=at + 60),  # a typed day line stays the user's
        X.Turn("明天还要去", at=at + 86_400),
    ]
    body = X.build_messages(turns, [], cal)[1]["content"]
    lines = body.splitlines()
    assert "【2026-12-03 周四】" in lines and "【2026-12-04 周五】" in lines
    assert lines.index("【2026-12-03 周四】") < lines.index("用户：我昨天去医院了")
    assert "用户：〖2026-01-01 周四〗我在北京" in lines
    assert "【2026-01-01 周四】" not in lines
    system = X.build_messages(turns, [], cal)[0]["content"]
    assert "replaces" in system and "event" in system


@pytest.fixture
async def rt(tmp_path: Path) -> AsyncIterator[Any]:
    runtime = make_runtime(tmp_path, embedding_proctol="local", embedding_model_name="auto")
    runtime.embedder.timeout = 60.0
    runtime.calendar = CAL.OwnerCalendar(CAL.zone_named("Asia/Shanghai"), lambda: NOW)
    runtime.store.calendar = runtime.calendar
    yield runtime
    await runtime.close()


def _caller(uid: int) -> Any:
    return T.ScopeRules().of_chat(K.target_from_ids(uid))


async def test_a_newer_version_comes_first_for_now_and_the_older_for_before(rt: Any) -> None:
    caller = _caller(62001)
    rt.store.clock = lambda: "2026-06-01T04:00:00+00:00"
    old = await rt.tools.write_memory(
        caller, {"content": "用户住在北京朝阳区", "tags": ["住址"], "importance": "high"}
    )
    rt.store.clock = lambda: "2026-11-20T04:00:00+00:00"
    # A newer memory on the same topic that nobody linked: not an update.
    await rt.tools.write_memory(caller, {"content": "用户的妈妈住在北京海淀区", "tags": ["家人"]})
    new = await rt.tools.write_memory(
        caller,
        {"content": "用户搬到了上海浦东", "tags": ["住址"], "replaces": old["memory"]["id"]},
    )
    assert new["ok"] and new["memory"]["supersedes"] == old["memory"]["id"]

    async def read(query: str) -> list[str]:
        result = await rt.tools.read_memory(caller, {"query": query, "top_k": 3})
        assert result["ok"], result
        return [m["content"] for m in result["memories"]]

    now = await read("我现在住在哪里？")
    assert now.index("用户搬到了上海浦东") < now.index("用户住在北京朝阳区")
    before = await read("我以前住在哪里？")
    assert before.index("用户住在北京朝阳区") < before.index("用户搬到了上海浦东")
    listed = await rt.tools.list_memory(caller, {"limit": 5})
    shown = {m["content"]: m for m in listed["memories"]}
    assert shown["用户住在北京朝阳区"]["superseded_by"] == new["memory"]["id"]
    assert "superseded_by" not in shown["用户的妈妈住在北京海淀区"]


async def test_replaces_must_name_a_memory_this_chat_may_read(rt: Any) -> None:
    theirs = await rt.tools.write_memory(
        _caller(62003), {"content": "用户住在杭州", "tags": ["住址"]}
    )
    for bad in [theirs["memory"]["id"], "no-such-id", ["x"], "x" * 500]:
        result = await rt.tools.write_memory(
            _caller(62002), {"content": "用户搬到了上海", "tags": ["住址"], "replaces": bad}
        )
        assert result["ok"] is False, bad
    listed = await rt.tools.list_memory(_caller(62002), {"limit": 5})
    assert listed["total"] == 0
    other = await rt.tools.list_memory(_caller(62003), {"limit": 5})
    assert "superseded_by" not in other["memories"][0]


async def test_an_extraction_that_replaces_a_fact_keeps_both_linked(rt: Any) -> None:
    part = K.user_key("62004")
    rt.store.clock = lambda: "2026-06-01T04:00:00+00:00"
    old = await rt.store.add(dataclasses.replace(new_memory(part, "user", "用户在海豚医疗上班")))
    rt.store.clock = lambda: datetime.now(UTC).isoformat(timespec="seconds")
    extractor = X.MemoryExtractor(rt.store, memory_limit=50, related_memories=5, max_ops=8)
    key = X.BatchKey("62004", part, "private")
    related = [await rt.store.get(T.operator_view(part), old.id)]
    answer = json.dumps(
        {
            "memories": [
                {"op": "add", "content": "用户跳槽到了腾讯", "replaces": "M1", "event": "2026-11"},
                {"op": "add", "content": "用户2026-12-01去了医院", "event": "2026-12-01"},
            ]
        },
        ensure_ascii=False,
    )
    outcome = X.ExtractionOutcome(key)
    await extractor.apply(key, answer, related, outcome)
    assert len(outcome.added) == 2 and not outcome.ignored
    rows = {r.content: r for r in await rt.store.list(T.operator_view(part), limit=10)}
    assert rows["用户在海豚医疗上班"].superseded_by == rows["用户跳槽到了腾讯"].id
    assert rows["用户跳槽到了腾讯"].supersedes == old.id
    assert rows["用户跳槽到了腾讯"].event_time == "2026-11"
    assert rows["用户2026-12-01去了医院"].event_time == "2026-12-01"


def test_an_imported_memory_is_swept_by_its_import_day_not_its_old_date() -> None:
    SW = lazy_import("amrita_plugin_memory.upkeep.archive.sweep")
    old = new_memory("p", "user", "用户2023年养了猫", importance="low").record(
        "m1", "2023-05-08T05:56:00+00:00"
    )
    now = datetime(2026, 12, 4, tzinfo=UTC)
    assert SW.expired(old, lambda level: 7, now)  # written here in 2023: past its lifetime
    imported = dataclasses.replace(old, imported_at="2026-12-01T00:00:00+00:00")
    assert not SW.expired(imported, lambda level: 7, now)
    assert SW.expired(imported, lambda level: 7, now + timedelta(days=8))
    assert imported.to_metadata()["imported_at"] == "2026-12-01T00:00:00+00:00"
