"""Memories imported from a file (``upkeep/import_lines``, ``upkeep/importing``) on the real stack.

Every bad line of a hostile file is named before anything is written; a good file's
memories keep their ``created_at`` (a stamp without an offset is the owner's time) and
``event_time``; importing the same file again adds nothing (fixed ids, live or archived);
the partition limit leaves lines out with their numbers; a forgotten user's memories from
before the forget are refused as a restore refuses them, a forget during the import voids
the user's lines still to come, and a later forget covers imported memories like any.
The export of ``ambot memory export`` imports into a fresh store with the same contents.
The command itself (with and without a running bot): ``tests/test_import_cli.py``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tests.botproject import make_runtime
from tests.helpers import new_memory, partition, runtime, view_of
from tests.lazy import lazy_import
from tests.reliability_stats import STATS

IM = lazy_import(
    "amrita_plugin_memory.upkeep.importing",
    "amrita_plugin_memory.upkeep.import_lines",
    "amrita_plugin_memory.core.calendar",
    "amrita_plugin_memory.storage.keys",
)

pytestmark = pytest.mark.usefixtures("embed_server")

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def calendar() -> Any:
    """The owner's calendar: Beijing time, now fixed."""
    return IM.OwnerCalendar(ZoneInfo("Asia/Shanghai"), clock=lambda: NOW)


def line(**fields: Any) -> str:
    base: dict[str, Any] = {
        "user_id": "12345",
        "content": "我养了一只叫糯米的猫",
        "created_at": "2023-05-08T13:56:00+08:00",
    }
    base.update(fields)
    return json.dumps({k: v for k, v in base.items() if v is not None}, ensure_ascii=False)


def refused(text: str | bytes) -> str:
    with pytest.raises(IM.ImportFileError) as caught:
        IM.parse_lines(text, calendar())
    STATS.inputs_tried += 1
    return str(caught.value)


# ---------------------------------------------------------------------------
# Validation (no store)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("not json", "不是合法的 JSON"),
        ("[1, 2]", "应为 JSON 对象"),
        ('"just a string"', "应为 JSON 对象"),
        (line(user_id=None), "user_id 必须是 QQ 号"),
        (line(user_id="abc"), "user_id 'abc' 无效：应为不以 0 开头的数字"),
        (line(user_id="0123"), "user_id '0123' 无效"),
        (line(user_id=True), "user_id 必须是 QQ 号"),
        (line(user_id="1" * 21), "user_id 过长（21 位，最多 20 位）"),
        (line(content=123), "content 必须是非空字符串"),
        (line(content="   "), "content 必须是非空字符串"),
        (line(content="猫" * 2001), "content 过长（2001 字，上限 2000 字）"),
        (line(created_at=None), "缺少 created_at"),
        (line(created_at=1683525360), "缺少 created_at"),
        (line(created_at="yesterday"), "created_at 'yesterday' 不是 ISO 8601 时间"),
        (line(created_at="2023-02-30T10:00:00"), "不是 ISO 8601 时间"),
        (line(created_at="2099-01-01T00:00:00+00:00"), "在未来"),
        (line(created_at="1969-12-31T00:00:00+00:00"), "早于 1970 年"),
        (line(event_time="2023-13"), "事件时间 '2023-13' 无法识别"),
        (line(event_time="上周"), "事件时间 '上周' 无法识别"),
        (line(event_time=2023), "event_time 必须是字符串"),
        (line(tags="猫,宠物"), "tags 必须是字符串数组"),
        (line(tags=["猫", 3]), "tags 必须是字符串数组"),
        (line(tags=[f"t{i}" for i in range(11)]), "tags 过多（11 个，上限 10 个）"),
        (line(tags=["长" * 33]), "过长（上限 32 字）"),
        (line(importance="urgent"), "importance 'urgent' 无效：应为 low / medium / high"),
        (line(importance=3), "importance 3 无效"),
        (line(scope="world"), "scope 'world' 无效"),
        (line(scope="group"), "scope 为 group 时必须给出 group_id"),
        (line(scope="group", group_id="abc"), "group_id 'abc' 无效"),
        (line(scope="group", group_id="300", origin="group:200"), "与 group_id 300 不符"),
        (line(scope="group", group_id="300", origin="private"), "origin 为 private，而 scope"),
        (line(group_id="300", origin="private"), "origin 为 private，与 group_id 300 不符"),
        (line(origin="public"), "origin 'public' 无效：应为 private 或 group:<群号>"),
        (line(origin="group:"), "origin 'group:' 无效"),
        (line(origin="group:x1"), "origin 中的群号 'x1' 无效"),
        (line(origin=["private"]), "origin 必须是字符串"),
        (line(source="manual"), "source 'manual' 无效"),
        (line(colour="red"), "未知字段 colour"),
    ],
)
def test_every_bad_field_is_named_with_its_line(text: str, said: str) -> None:
    good = line()
    message = refused(f"{good}\n\n{text}\n{good}\n")
    assert message.startswith("导入文件有 1 行无效，未写入任何记忆：")
    assert "第 3 行：" in message and said in message, message


def test_a_hostile_file_is_refused_whole_with_every_bad_line() -> None:
    good = line().encode()
    message = refused(b"\n".join([good, b"{bad", good, b"x" * (70 * 1024), b"\xff\xfe", good]))
    assert message.startswith("导入文件有 3 行无效")
    assert "第 2 行：不是合法的 JSON" in message
    assert "第 4 行：过长（71680 字节，上限 65536 字节）" in message
    assert "第 5 行：不是 UTF-8 文本" in message

    many = "\n".join(line(importance="urgent") for _ in range(25))
    message = refused(many)
    assert message.startswith("导入文件有 25 行无效") and "……另有 5 行有误" in message
    assert message.count("importance 'urgent' 无效") == 20

    assert refused("\n  \n") == "导入文件中没有任何记忆"
    assert "导入文件过大" in refused(b" " * (IM.FILE_BYTES + 1))
    too_many = "\n".join(line(content=f"第 {i} 件事") for i in range(IM.MAX_LINES + 1))
    assert (
        refused(too_many) == f"导入文件的记忆过多（{IM.MAX_LINES + 1} 条，上限 {IM.MAX_LINES} 条）"
    )


def test_good_lines_keep_their_moment_dates_and_owner() -> None:
    text = "\n".join(
        [
            line(),  # an offset: that instant
            line(created_at="2023-05-08T13:56:00"),  # no offset: the owner's zone (UTC+8)
            line(created_at="2023-05-08T05:56:00Z", event_time="2023-05"),
            line(scope="group", group_id=20001, tags=[" 猫 ", "猫", "宠物"], importance="high"),
            line(user_id=54321, group_id="20001", source="auto", event_time="2023"),
        ]
    )
    first, naive, utc, group, said_in_group = IM.parse_lines(text, calendar())
    assert [x.line for x in (first, naive, utc, group, said_in_group)] == [1, 2, 3, 4, 5]
    assert first.memory.created_at == "2023-05-08T05:56:00+00:00"
    assert naive.memory.created_at == first.memory.created_at
    assert naive.memory.memory_id == first.memory.memory_id  # the same memory: the same id
    assert utc.memory.memory_id == first.memory.memory_id and utc.memory.event_time == "2023-05"
    assert first.memory.partition == IM.user_key("12345") == partition(12345)
    assert (first.memory.scope, first.memory.origin, first.memory.author) == ("user", "private", "")
    assert len(first.memory.memory_id) == 32
    assert group.memory.partition == IM.group_key("20001")
    assert (group.memory.scope, group.memory.origin) == ("group", "group:20001")
    assert group.memory.author == "12345" and group.memory.tags == ["猫", "宠物"]
    assert group.memory.importance == "high" and group.memory.memory_id != first.memory.memory_id
    assert said_in_group.memory.partition == partition(54321)
    assert said_in_group.memory.origin == "group:20001" and said_in_group.memory.source == "auto"
    assert said_in_group.to_json()["group_id"] == "20001"
    again = IM.parse_items([x.to_json() for x in (group, said_in_group)], calendar(), most=64)
    assert [x.memory for x in again] == [group.memory, said_in_group.memory]
    assert [x.line for x in again] == [4, 5]


def test_requests_of_a_running_bot_are_checked_like_a_file() -> None:
    good = json.loads(line())
    with pytest.raises(IM.ImportFileError, match="一次最多导入 2 条"):
        IM.parse_items([good] * 3, calendar(), most=2)
    with pytest.raises(IM.ImportFileError, match="lines 必须是非空数组"):
        IM.parse_items({"line": 1}, calendar(), most=2)
    with pytest.raises(IM.ImportFileError, match="第 7 行：importance 'x' 无效"):
        IM.parse_items([{**good, "line": 7, "importance": "x"}], calendar(), most=2)
    STATS.inputs_tried += 3


# ---------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------


def dated(uid: int, n: int, *, day: int = 1, **fields: Any) -> str:
    """A line of user ``uid``: their ``n``-th thing, said at ``n`` o'clock on March ``day``."""
    said = f"2024-03-{day:02d}T{n:02d}:00:00+08:00"
    return line(user_id=str(uid), content=f"用户 {uid} 的第 {n} 件事", created_at=said, **fields)


async def test_importing_twice_adds_nothing_and_the_limit_leaves_lines_out(store: Any) -> None:
    text = "\n".join(
        [
            *(dated(18801, n, event_time="2024-02-29") for n in range(5)),  # lines 1-5
            dated(18801, 0, event_time="2024-02-29"),  # line 6: line 1 again
            dated(18802, 1, scope="group", group_id="28801"),  # line 7
        ]
    )
    lines = IM.parse_lines(text, calendar())
    seen: list[tuple[int, int]] = []
    report = await IM.import_lines(
        store, lines, limit=3, batch_size=2, progress=lambda d, t: seen.append((d, t))
    )
    assert seen == [(0, 7), (2, 7), (4, 7), (6, 7), (7, 7)]
    assert report.to_json() == {
        "total": 7,
        "added": [1, 2, 3, 7],
        "existing": [6],
        "left_out": {"full": [4, 5]},
        "full": [partition(18801)],
    }
    assert report.lines()[1] == "未导入 2 条（分区已满（per_session_memory_limit））：第 4、5 行"
    stored = {r.id: r for r in await store.list(view_of(partition(18801)), limit=10)}
    assert set(stored) == {x.memory.memory_id for x in lines[:3]}
    first = stored[lines[0].memory.memory_id]
    assert first.created_at == "2024-02-29T16:00:00+00:00" == first.updated_at
    assert first.event_time == "2024-02-29" and first.content == "用户 18801 的第 0 件事"
    (group,) = await store.list(view_of(IM.group_key("28801")))
    assert (group.author, group.origin, group.scope) == ("18802", "group:28801", "group")

    again = await IM.import_lines(store, lines, limit=3)
    assert again.added == [] and again.existing == [1, 2, 3, 6, 7]
    assert again.left_out == {"full": [4, 5]}

    # The user deletes one (archived): it stays deleted; the room it left takes line 4.
    assert await store.delete(partition(18801), lines[1].memory.memory_id)
    third = await IM.import_lines(store, lines, limit=3)
    assert third.added == [4] and third.existing == [1, 2, 3, 6, 7]
    assert third.left_out == {"full": [5]}
    assert await store.count(view_of(partition(18801))) == 3


@pytest.mark.parametrize("store", ["local"], indirect=True)
async def test_forgotten_users_are_refused_and_a_forget_voids_the_rest(
    store: Any, tmp_path: Path, orm_db: str
) -> None:
    from amrita_plugin_memory.infra.fences import UserEpochs
    from amrita_plugin_memory.storage.shared.sessions import orm_session
    from amrita_plugin_memory.storage.users.fences import UserFences
    from amrita_plugin_memory.storage.users.tombstones import ForgottenUsers
    from amrita_plugin_memory.upkeep.users.erase import erase_partition

    forgotten = ForgottenUsers.in_dir(tmp_path, orm_session)
    store.forgotten = forgotten
    forgot_at = datetime(2024, 3, 2, tzinfo=UTC)
    await forgotten.add("18901", partition(18901), forgot_at)
    text = "\n".join(
        [
            dated(18901, 1, day=1),  # 1: before the forget
            dated(18901, 2, day=3),  # 2: after it: said again since
            dated(18901, 3, day=1, scope="group", group_id="28901"),  # 3: kept, unmarked
            dated(18902, 4, day=1),  # 4: someone else
            *(dated(18903, n, day=5) for n in range(5, 9)),  # 5-8: forgotten during the import
        ]
    )
    lines = IM.parse_lines(text, calendar())
    fences = UserFences(UserEpochs(), forgotten)

    def progress(done: int, total: int) -> None:
        if done == 6:  # after the third batch: user 18903 is forgotten meanwhile
            fences.epochs.bump("18903")

    report = await IM.import_lines(
        store, lines, limit=50, fences=fences, batch_size=2, progress=progress
    )
    assert report.added == [2, 3, 4, 5, 6]
    assert report.left_out == {"forgotten": [1], "voided": [7, 8]}
    assert report.lines()[1] == "未导入 1 条（该用户已被遗忘，遗忘之前的记忆不再导入）：第 1 行"
    (kept,) = await store.list(view_of(IM.group_key("28901")))
    assert kept.author == "" and kept.content == "用户 18901 的第 3 件事"
    assert [r.content for r in await store.list(view_of(partition(18901)))] == [
        "用户 18901 的第 2 件事"
    ]

    # A later forget covers imported memories like any other; importing again brings none back.
    await forgotten.add("18902", partition(18902), datetime.now(UTC))
    assert await erase_partition(store, partition(18902)) == (1, 0)
    again = await IM.import_lines(
        store, lines, limit=50, fences=UserFences(UserEpochs(), forgotten)
    )
    assert again.left_out["forgotten"] == [1, 4]
    assert await store.count(view_of(partition(18902))) == 0


async def test_an_export_imports_into_a_fresh_store_with_the_same_contents(
    tmp_path: Path,
) -> None:
    from amrita_plugin_memory.storage.groups.stores import GroupStores

    rt = runtime()
    uid, gid = 18701, 28701
    key = partition(uid)
    await rt.store.add(
        new_memory(
            key,
            "user",
            "我在杭州读的大学",
            tags=["学校"],
            importance="high",
            created_at="2019-09-01T02:00:00+00:00",
            event_time="2015-09",
        )
    )
    await rt.store.add(
        new_memory(key, "user", "群里说过喜欢爬山", origin=f"group:{gid}", source="auto")
    )
    await rt.store.add(
        new_memory(
            IM.group_key(gid),
            "group",
            "群规：周五聚餐",
            origin=f"group:{gid}",
            author=str(uid),
            created_at="2022-01-07T12:00:00+00:00",
        )
    )
    document = await rt.user_data(GroupStores.build(rt.config.file, rt.store.coherence)).export(
        str(uid)
    )
    text = json.dumps(document, ensure_ascii=False, indent=1)
    assert IM.is_export_document(text.encode())

    def contents(records: list[Any]) -> set[tuple[Any, ...]]:
        return {
            (
                r["content"],
                r["partition"],
                r["scope"],
                r["origin"],
                tuple(r["tags"]),
                r["importance"],
                r["created_at"],
                r.get("event_time", ""),
                r.get("author", ""),
                r.get("source", ""),
            )
            for r in records
        }

    fresh = make_runtime(tmp_path / "fresh")
    try:
        lines = IM.parse_lines(text, fresh.calendar)
        report = await IM.import_lines(fresh.store, lines, limit=50, fences=fresh.fences)
        assert report.added == [1, 2, 3] and report.lines(unit="条")[0].startswith(
            "共 3 条：新增 3 条"
        )
        again = await fresh.user_data(
            GroupStores.build(fresh.config.file, fresh.store.coherence)
        ).export(str(uid))
        assert contents(again["memories"]) == contents(document["memories"])
        assert contents(again["group_memories"]) == contents(document["group_memories"])
        assert len(again["memories"]) == 2 and len(again["group_memories"]) == 1
        second = await IM.import_lines(fresh.store, IM.parse_lines(text, fresh.calendar), limit=50)
        assert second.added == [] and second.existing == [1, 2, 3]
    finally:
        await fresh.close()
