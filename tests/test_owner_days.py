"""Every shown date is the owner's day (issue #45 §1), wherever it is shown.

A stamp at 23:30 UTC on 3 December 2026 is Friday 4 December in Beijing
(``[memory] timezone = "Asia/Shanghai"``) and Thursday 3 December in UTC: active
recall's ``<MEMORIES>`` lines, the chat tools' answers, ``/memory`` listings, the
archive's lines, ``ambot memory``'s times, the console's stamps (and its page, which
prints them as sent, in any browser zone), a user's export (UTC kept, the local time
beside it) and the L3 loop's clock. The stored stamp stays UTC throughout. The
usage ledger's days are tested in ``tests/test_usage_ledger.py``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.botproject import make_runtime
from tests.helpers import new_memory, partition, runtime, runtime_with
from tests.lazy import lazy_import

K = lazy_import("amrita_plugin_memory.core.calendar")

STAMP = "2026-12-03T23:30:00+00:00"
"""When the memories of these tests were said (stored as it is: aware UTC)."""

ZONES = [
    # zone, the owner's day, its weekday, the stamp in the owner's zone
    ("Asia/Shanghai", "2026-12-04", "周五", "2026-12-04T07:30:00+08:00"),
    ("UTC", "2026-12-03", "周四", "2026-12-03T23:30:00+00:00"),
]

pytestmark = pytest.mark.usefixtures("embed_server")


def calendar(zone: str) -> Any:
    """The owner's calendar of ``zone``, its clock at :data:`STAMP`."""
    return K.OwnerCalendar(K.zone_named(zone), lambda: datetime.fromisoformat(STAMP))


def _uid() -> int:
    return 45_100_000 + uuid.uuid4().int % 100_000


def _record(**fields: Any) -> Any:
    from amrita_plugin_memory.core.records import MemoryRecord

    return MemoryRecord(id="m1", content="用户去了医院", partition="p", scope="user", **fields)


# ---------------------------------------------------------------------------
# <MEMORIES>
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(("zone", "day", "weekday", "local"), ZONES)
def test_a_recalled_line_shows_the_owners_day_its_weekday_and_another_event_day(
    zone: str, day: str, weekday: str, local: str
) -> None:
    from amrita_plugin_memory.prompting.blocks import memory_date, render_memories_block

    cal = calendar(zone)
    said = _record(created_at=STAMP, updated_at=STAMP)
    assert memory_date(cal, said) == f"{day} {weekday}"
    earlier = _record(created_at=STAMP, updated_at=STAMP, event_time="2026-12-01")
    assert memory_date(cal, earlier) == f"{day} {weekday}; 事件 2026-12-01"
    same_day = _record(created_at=STAMP, updated_at=STAMP, event_time=day)
    assert memory_date(cal, same_day) == f"{day} {weekday}"  # said that day: shown once
    month = _record(created_at=STAMP, updated_at=STAMP, event_time="2026-11")
    assert memory_date(cal, month) == f"{day} {weekday}; 事件 2026-11"
    # The last change counts (a memory updated later is shown with that day).
    changed = _record(created_at="2026-11-30T01:00:00+00:00", updated_at=STAMP)
    assert memory_date(cal, changed) == f"{day} {weekday}"
    block = render_memories_block([(memory_date(cal, earlier), earlier.content)], max_chars=600)
    assert f"\n- [{day} {weekday}; 事件 2026-12-01] 用户去了医院\n" in block


@pytest.mark.parametrize(("zone", "day", "weekday", "local"), ZONES)
async def test_active_recall_shows_each_memory_on_the_owners_day(
    zone: str, day: str, weekday: str, local: str
) -> None:
    from amrita_plugin_memory.active.recall import MemoryRecall
    from amrita_plugin_memory.storage.keys import target_from_ids
    from amrita_plugin_memory.storage.scope import ScopeRules

    rt = runtime()
    uid = _uid()
    await rt.store.add(new_memory(partition(uid), "user", "用户喜欢爬山", created_at=STAMP))
    await rt.store.add(
        new_memory(
            partition(uid), "user", "用户去医院做了体检", created_at=STAMP, event_time="2026-12-01"
        )
    )
    recall = MemoryRecall(
        rt.store,
        calendar=calendar(zone),
        top_k=5,
        max_chars=600,
        min_similarity=-1.0,  # every hit: the lines, not the threshold, are tested
        min_similarity_non_cjk=-1.0,
        timeout=30.0,
    )
    block = await recall.block(ScopeRules().of_turn(target_from_ids(uid)), "我最近做了什么")
    lines = block.splitlines()
    assert f"- [{day} {weekday}] 用户喜欢爬山" in lines, block
    assert f"- [{day} {weekday}; 事件 2026-12-01] 用户去医院做了体检" in lines, block
    stored = await rt.store.list(ScopeRules().of_turn(target_from_ids(uid)).view("user"))
    assert {r.created_at for r in stored} == {STAMP}  # stored as said: UTC


# ---------------------------------------------------------------------------
# The chat tools and the /memory commands
# ---------------------------------------------------------------------------


def _tools(zone: str) -> Any:
    from amrita_plugin_memory.tools.memory_tools import MemoryTools

    rt = runtime()
    return MemoryTools(rt.store, rt.memo, calendar=calendar(zone), memory_limit=50)


@pytest.mark.parametrize(("zone", "day", "weekday", "local"), ZONES)
async def test_the_tools_answer_with_stamps_in_the_owners_zone(
    zone: str, day: str, weekday: str, local: str
) -> None:
    from amrita_plugin_memory.storage.keys import target_from_ids
    from amrita_plugin_memory.storage.scope import ScopeRules

    uid = _uid()
    memory = new_memory(
        partition(uid), "user", "用户周四去看了牙医", created_at=STAMP, event_time="2026-12-01"
    )
    record = await runtime().store.add(memory)
    tools = _tools(zone)
    scope = ScopeRules().of_turn(target_from_ids(uid))
    listed = await tools.list_memory(scope, {"limit": 10, "scope": "user"})
    found = await tools.read_memory(scope, {"query": "牙医", "scope": "user"})
    changed = await tools.update_memory(scope, {"id": record.id, "scope": "user", "tags": ["牙"]})
    for answer in (listed["memories"][0], found["memories"][0], changed["memory"]):
        assert answer["created_at"] == local, answer
        assert answer["event_time"] == "2026-12-01"
    assert (await runtime().store.get(scope.view("user"), record.id)).created_at == STAMP


@pytest.mark.parametrize(("zone", "day", "weekday", "local"), ZONES)
async def test_memory_listings_and_the_archive_show_the_owners_day(
    zone: str, day: str, weekday: str, local: str
) -> None:
    from amrita_plugin_memory.storage.keys import target_from_ids
    from amrita_plugin_memory.storage.scope import ScopeRules
    from amrita_plugin_memory.tools.commands import CommandRequest, MemoryCommands

    uid = _uid()
    store = runtime().store
    await store.add(new_memory(partition(uid), "user", "用户周四去看了牙医", created_at=STAMP))
    kept = await store.add(
        new_memory(
            partition(uid), "user", "用户去医院做了体检", created_at=STAMP, event_time="2026-12-01"
        )
    )
    commands = MemoryCommands(_tools(zone))
    scope = ScopeRules().of_turn(target_from_ids(uid))
    listing = await commands.run(CommandRequest("user", "list", ""), scope)
    assert listing.count(f"｜{day}") == 2, listing
    assert f"｜{day}｜事件 2026-12-01" in listing, listing
    other = "2026-12-03" if day == "2026-12-04" else "2026-12-04"
    assert other not in listing
    search = await commands.run(CommandRequest("user", "search", "牙医"), scope)
    assert f"｜{day}" in search and other not in search, search

    # The archive: its line says when it was archived, in the owner's hours.
    saved = store.archive.clock
    store.archive.clock = lambda: STAMP
    try:
        assert await store.delete(partition(uid), kept.id)
    finally:
        store.archive.clock = saved
    archive = await commands.run(CommandRequest("user", "archive", ""), scope)
    hour = "07:30" if day == "2026-12-04" else "23:30"
    assert f"归档于 {day} {hour}" in archive, archive


def test_an_archive_row_is_described_in_the_owners_hours() -> None:
    from amrita_plugin_memory.storage.archive.store import ArchivedMemory
    from amrita_plugin_memory.upkeep.archive.view import describe_row, listing_lines

    meta = {"partition": "p", "scope": "user", "created_at": STAMP, "updated_at": STAMP}
    row = ArchivedMemory.from_chroma(
        "m1~abc", "用户去了医院", {**meta, "archived_at": STAMP, "reason": "deleted"}
    )
    for zone, day, _weekday, local in ZONES:
        hour = local[11:16]
        assert f"，归档于 {day} {hour}]  用户去了医院" in describe_row(row, calendar(zone))
        assert f"归档于 {day} {hour}" in listing_lines("p", 1, [row], calendar(zone))[1]
        compact = row.compact(calendar(zone))
        assert compact["archived_at"] == compact["created_at"] == local


# ---------------------------------------------------------------------------
# ambot memory, the console
# ---------------------------------------------------------------------------


def test_the_command_line_prints_the_owners_time_not_the_terminals() -> None:
    from amrita_plugin_memory.cli.output import when

    for zone, day, _weekday, local in ZONES:
        assert when(STAMP, calendar(zone)) == f"{day} {local[11:19]}"
        assert when(local, calendar(zone)) == f"{day} {local[11:19]}"  # sent by the bot
    assert when("", calendar("UTC")) == "?"
    assert when("不是时间", calendar("UTC")) == "不是时间"


def test_the_console_sends_every_stamp_in_the_owners_zone() -> None:
    from amrita_plugin_memory.console.dates import local_stamps

    sent = {
        "created_at": STAMP,
        "rows": [{"archived_at": STAMP, "content": STAMP, "time": STAMP}],
        "usage": {"days": ["2026-12-03"], "resets_at": STAMP, "used_at": 3},
        "subconscious": {"next_run": STAMP, "last_update": STAMP, "since": STAMP},
        "day_at": "2026-12-03",
        "empty_at": "",
    }
    for zone, _day, _weekday, local in ZONES:
        shown = local_stamps(sent, calendar(zone))
        assert shown["created_at"] == shown["rows"][0]["archived_at"] == local
        assert shown["rows"][0]["time"] == shown["usage"]["resets_at"] == local
        assert set(shown["subconscious"].values()) == {local}
        # Text, a day, a number and an empty value are not stamps.
        assert shown["rows"][0]["content"] == STAMP
        assert shown["usage"]["days"] == ["2026-12-03"] and shown["usage"]["used_at"] == 3
        assert shown["day_at"] == "2026-12-03" and shown["empty_at"] == ""
    assert sent["created_at"] == STAMP  # the answer is a copy


def _page_when() -> str:
    page = Path(__file__).resolve().parent.parent / "amrita_plugin_memory/adapters/static"
    text = (page / "memory_console.js").read_text(encoding="utf-8")
    match = re.search(r"^function when\(iso\) \{.*?^\}$", text, re.MULTILINE | re.DOTALL)
    assert match, "the page's when() is gone"
    assert "new Date(" not in text  # nothing on the page converts a stamp to its own zone
    return match.group(0)


@pytest.mark.process  # node
def test_the_page_prints_a_stamp_as_sent_in_any_browser_zone() -> None:
    """The page's ``when()`` run by Node in New York: a Beijing stamp keeps its day and hour
    (converting it, as the page did, gave ``2026-12-03 18:30``)."""
    source = _page_when()
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (the page's source was checked above)")
    script = (
        f"{source}\nconsole.log(JSON.stringify(["
        "when('2026-12-04T07:30:00+08:00'), when('2026-12-03T23:30:00+00:00'), when(''), "
        "when('?'), new Date('2026-12-04T07:30:00+08:00').getHours()]));"
    )
    env = {**os.environ, "TZ": "America/New_York"}
    out = subprocess.run(
        [node, "-e", script], capture_output=True, text=True, env=env, timeout=60, check=True
    )
    assert json.loads(out.stdout) == ["2026-12-04 07:30", "2026-12-03 23:30", "—", "?", 18]


# ---------------------------------------------------------------------------
# A user's export
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(("zone", "day", "weekday", "local"), ZONES)
async def test_the_export_keeps_utc_and_shows_the_owners_time_beside_it(
    zone: str, day: str, weekday: str, local: str
) -> None:
    from amrita_plugin_memory.adapters.group_hooks import current_hooks

    hooks = current_hooks()
    assert hooks is not None
    data = runtime().user_data(hooks.awareness.stores)
    data.calendar = calendar(zone)
    uid = _uid()
    await runtime().store.add(new_memory(partition(uid), "user", "用户喜欢爬山", created_at=STAMP))
    doc = await data.export(str(uid))
    assert doc["timezone"] == zone
    (memory,) = doc["memories"]
    assert memory["created_at"] == memory["updated_at"] == STAMP
    assert memory["created_local"] == memory["updated_local"] == local


# ---------------------------------------------------------------------------
# The L3 loop's clock
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(("zone", "day", "weekday", "local"), ZONES)
async def test_the_loop_tells_its_model_the_owners_time(
    zone: str, day: str, weekday: str, local: str, tmp_path: Path
) -> None:
    from amrita_plugin_memory.subconscious import create_runner
    from amrita_plugin_memory.subconscious.prompts import format_abstract

    clone = runtime_with(
        tmp_path,
        own_data_dir=True,
        enabled=True,
        target_user_id=str(_uid()),
        enable_knowledge=True,
        knowledge_collection_name=f"kb-days-{uuid.uuid4().hex[:8]}",
    )
    clone.calendar = calendar(zone)
    runner = create_runner(clone, state_uid=f"days-{uuid.uuid4().hex[:8]}")
    try:
        guide = runner.render_guide("prompt_knowledge_file")
        assert f"当前时间：{day} {local[11:19]}（{weekday}）" in guide, guide
        assert runner.pending.calendar is runner.messenger.calendar is clone.calendar
        # The knowledge tools (the loop's and the chat's) show an entry's time the same way.
        assert runner.knowledge is not None and runner.knowledge_tools is not None
        entry = await runner.knowledge.create("调试技巧", "用 pdb 定位问题", "第一行")
        listed = await runner.knowledge_tools.list_entries({})
        shown = listed["entries"][0]["updated_at"]
        assert shown == clone.calendar.show_stamp(entry.updated_at) and shown.endswith(local[-6:])
        assert entry.updated_at.endswith("+00:00")  # stored UTC
    finally:
        await runner.shutdown()
    entry: Any = {"time": STAMP, "cycle": 3, "outcome": "success", "summary": "整理了记忆"}
    line = format_abstract(entry, calendar(zone))
    assert line == f"{day} {local[11:16]} 第 3 轮（完成）：整理了记忆"


# ---------------------------------------------------------------------------
# One calendar per runtime, from its configuration
# ---------------------------------------------------------------------------


async def test_the_runtime_hands_its_one_calendar_to_every_part(tmp_path: Path) -> None:
    from amrita_plugin_memory.active import ActiveMemory
    from amrita_plugin_memory.storage.groups.stores import GroupStores

    rt = make_runtime(tmp_path / "data", timezone="Asia/Shanghai")
    try:
        cal = rt.calendar
        assert cal.name == "Asia/Shanghai"
        assert cal.show_day(STAMP) == "2026-12-04 周五"
        assert rt.tools.calendar is cal and rt.usage.calendar is cal
        assert rt.user_data(GroupStores.build(rt.config.file)).calendar is cal
        active = ActiveMemory.build(rt)
        assert active.recaller.calendar is cal
        active.configure(rt.config.file)  # a new configuration keeps the one calendar
        assert active.recaller.calendar is cal
    finally:
        await rt.close()
    utc = make_runtime(tmp_path / "utc", timezone="UTC")
    try:
        assert utc.calendar.show_day(STAMP) == "2026-12-03 周四"
    finally:
        await utc.close()
