"""The L3 loop's state rows and the group windows wait for the shared tables with a bound.

A database that stops answering (a server gone silent, a pool with no free
connection) makes each operation give up after its :class:`SharedWork` bound
with a :class:`SharedDatabaseError`, instead of holding a chat turn or a cycle
for ever; the work left running ends by itself when the database answers.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.helpers import user_view
from tests.test_forget_final import _Hung


async def test_the_loop_state_gives_up_within_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    from amrita_plugin_memory.storage.shared.sessions import SharedDatabaseError, SharedWork
    from amrita_plugin_memory.storage.users import loop_state_row
    from amrita_plugin_memory.storage.users.loop_state_row import LoopStateRow

    gate = asyncio.Event()
    monkeypatch.setattr(loop_state_row, "orm_session", lambda: _Hung(gate))
    work = SharedWork(0.3)
    rows = LoopStateRow("bounded-test", target="30491", work=work)
    changed: list[int] = []
    try:
        async with asyncio.timeout(5):  # without the bound each of these waits for ever
            with pytest.raises(SharedDatabaseError, match="读取 L3 循环状态"):
                await rows.read(bury=True)
            with pytest.raises(SharedDatabaseError, match="读取 L3 循环状态"):
                await rows.owners()
            with pytest.raises(SharedDatabaseError, match="写入 L3 循环状态"):
                await rows.edit(lambda d: changed.append(1))
        assert work.running == 3  # left running, never cancelled half-way
        assert changed == []  # the change never ran on a document nobody read
    finally:
        gate.set()
        await work.settle()
    assert work.running == 0


async def test_the_group_window_gives_up_within_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from amrita_plugin_memory.core.config import GroupContextConfig
    from amrita_plugin_memory.prompting.group_window import WindowEntry
    from amrita_plugin_memory.storage.groups import window_store
    from amrita_plugin_memory.storage.groups.window_store import GroupWindowStore
    from amrita_plugin_memory.storage.shared.sessions import SharedDatabaseError, SharedWork

    gate = asyncio.Event()
    from amrita_plugin_memory.storage.shared import sessions

    monkeypatch.setattr(window_store, "orm_session", lambda: _Hung(gate))
    monkeypatch.setattr(sessions, "orm_session", lambda: _Hung(gate))  # read_scalars, commit_one
    work = SharedWork(0.3)
    windows = GroupWindowStore(GroupContextConfig(), work=work)
    windows.append("9001", "30471", "甲", "早上好", is_bot=False, at=1.0)
    try:
        async with asyncio.timeout(5):
            with pytest.raises(SharedDatabaseError, match="读取群上下文窗口"):
                await windows.recent_any("9001", 10)
            assert await windows.flush("9001") is False  # the read before the write gave up
            windows._window("9001").loaded = True  # now the write itself meets the silence
            assert await windows.flush("9001") is False
            assert [e.text for e in windows._window("9001").pending] == ["早上好"]  # kept
            with pytest.raises(SharedDatabaseError, match="读取群上下文窗口"):
                await windows.messages_of("30471")
            with pytest.raises(SharedDatabaseError, match="清空群上下文窗口"):
                await windows.clear("9001")
            with pytest.raises(SharedDatabaseError, match="压缩群上下文窗口"):
                await windows.compact()
            await windows.close()  # shutdown: the flush gives up, close returns
    finally:
        gate.set()
        await work.settle()
    assert work.running == 0
    entries: list[Any] = windows._window("9001").pending
    assert all(isinstance(e, WindowEntry) for e in entries)


async def test_the_consent_store_gives_up_within_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from amrita_plugin_memory.storage import consent_store
    from amrita_plugin_memory.storage.consent_store import ConsentStore
    from amrita_plugin_memory.storage.shared.sessions import SharedDatabaseError, SharedWork

    gate = asyncio.Event()
    monkeypatch.setattr(consent_store, "orm_session", lambda: _Hung(gate))
    work = SharedWork(0.3)
    consent = ConsentStore(work)  # local mode: its coherence is inactive, the bound holds
    try:
        async with asyncio.timeout(5):
            with pytest.raises(SharedDatabaseError, match="读取自动记忆开关"):
                await consent.allows(user_view("30511"))
            with pytest.raises(SharedDatabaseError, match="读取自动记忆开关"):
                await consent.allows_now(user_view("30511"))
            with pytest.raises(SharedDatabaseError, match="读取自动记忆开关"):
                await consent.set_allowed(user_view("30511"), False)
            with pytest.raises(SharedDatabaseError, match="读取自动记忆开关"):
                await consent.opted_out_since(user_view("30511"))
            with pytest.raises(SharedDatabaseError, match="读取主动记忆提示记录"):
                await consent.noticed(user_view("30511"))
            with pytest.raises(SharedDatabaseError, match="写入主动记忆提示记录"):
                await consent.mark_noticed("30511")
            with pytest.raises(SharedDatabaseError, match="删除主动记忆提示记录"):
                await consent.forget_notice("30511")
        assert work.running == 7
        assert consent._opted_out is None  # nothing cached from a read that never ended
    finally:
        gate.set()
        await work.settle()
    assert work.running == 0


async def test_the_persona_store_gives_up_within_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from amrita_plugin_memory.storage.groups import persona_store
    from amrita_plugin_memory.storage.groups.persona_store import PersonaStore
    from amrita_plugin_memory.storage.shared.sessions import SharedDatabaseError, SharedWork

    gate = asyncio.Event()
    monkeypatch.setattr(persona_store, "orm_session", lambda: _Hung(gate))
    work = SharedWork(0.3)
    personas = PersonaStore(work=work)
    try:
        async with asyncio.timeout(5):
            with pytest.raises(SharedDatabaseError, match="读取成员画像"):
                await personas.of_users_anywhere(["30521", "30522"])
            with pytest.raises(SharedDatabaseError, match="读取成员画像"):
                await personas.merge("30521", [("爱好", "围棋")], now=1.0, max_chars=200)
            with pytest.raises(SharedDatabaseError, match="读取成员画像"):
                await personas.clear("30521")
            with pytest.raises(SharedDatabaseError, match="读取成员画像"):
                await personas.set_learning("30521", False)
            with pytest.raises(SharedDatabaseError, match="读取成员画像"):
                await personas.forget("30521")
        assert work.running == 5
        assert not personas.cached("30521")  # nothing cached from a read that never ended
    finally:
        gate.set()
        await work.settle()
    assert work.running == 0


async def test_the_self_memory_gives_up_within_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from amrita_plugin_memory.storage.groups import self_store
    from amrita_plugin_memory.storage.groups.self_store import SelfMemoryStore
    from amrita_plugin_memory.storage.shared.sessions import SharedDatabaseError, SharedWork

    gate = asyncio.Event()
    monkeypatch.setattr(self_store, "orm_session", lambda: _Hung(gate))
    work = SharedWork(0.3)
    entries = SelfMemoryStore(500, work=work)
    try:
        async with asyncio.timeout(5):
            with pytest.raises(SharedDatabaseError, match="读取自我记忆"):
                await entries.texts()
            with pytest.raises(SharedDatabaseError, match="读取自我记忆"):
                await entries.add("我是一只猫")
            with pytest.raises(SharedDatabaseError, match="读取自我记忆"):
                await entries.delete(1)
            with pytest.raises(SharedDatabaseError, match="读取自我记忆"):
                await entries.delete_id(1)
            entries._changed_here([])  # a cached (empty) list: the insert itself meets the silence
            with pytest.raises(SharedDatabaseError, match="添加自我记忆"):
                await entries.add("我是一只猫")
        assert work.running == 5
    finally:
        gate.set()
        await work.settle()
    assert work.running == 0


async def test_the_group_directory_gives_up_within_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from amrita_plugin_memory.core.config import GroupContextConfig
    from amrita_plugin_memory.storage.groups import directory
    from amrita_plugin_memory.storage.groups.directory import GroupDirectory
    from amrita_plugin_memory.storage.scope import GroupView
    from amrita_plugin_memory.storage.shared.sessions import SharedDatabaseError, SharedWork

    gate = asyncio.Event()
    monkeypatch.setattr(directory, "orm_session", lambda: _Hung(gate))
    work = SharedWork(0.3)
    groups = GroupDirectory(GroupContextConfig(), work=work)
    try:
        async with asyncio.timeout(5):
            with pytest.raises(SharedDatabaseError, match="读取群设置"):
                await groups.anonymize("9002")
            with pytest.raises(SharedDatabaseError, match="读取群设置"):
                await groups.member_labels(GroupView("9002"), [], [("30531", "甲")])
            with pytest.raises(SharedDatabaseError, match="修改群设置"):
                await groups.set_anonymize("9002", True)
            with pytest.raises(SharedDatabaseError, match="分配群成员代号"):
                await groups.labels("9002", ["30531"])
            with pytest.raises(SharedDatabaseError, match="分配群成员代号"):
                await groups.labels("9002", ["30532"])  # waits behind the group's lock: bounded
            with pytest.raises(SharedDatabaseError, match="读取群成员代号"):
                await groups.labels_of("30531")
            with pytest.raises(SharedDatabaseError, match="删除群成员代号"):
                await groups.forget_user("30531")
        assert work.running == 7
        assert "9002" not in groups._labels  # no label cached that was never stored
    finally:
        gate.set()
        await work.settle()
    assert work.running == 0


async def test_the_shared_documents_give_up_within_their_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from amrita_plugin_memory.storage.shared import documents
    from amrita_plugin_memory.storage.shared.coherence import Coherence
    from amrita_plugin_memory.storage.shared.documents import SharedDocuments
    from amrita_plugin_memory.storage.shared.sessions import SharedDatabaseError, SharedWork

    gate = asyncio.Event()
    monkeypatch.setattr(documents, "orm_session", lambda: _Hung(gate))
    work = SharedWork(0.3)
    docs = SharedDocuments("bounded-test", Coherence("bounded-test"), work=work)
    try:
        async with asyncio.timeout(5):  # an inactive coherence alone would wait for ever
            with pytest.raises(SharedDatabaseError, match="读取共享文档"):
                await docs.get("a")
            with pytest.raises(SharedDatabaseError, match="读取共享文档"):
                await docs.all()
            with pytest.raises(SharedDatabaseError, match="写入共享文档"):
                await docs.put("a", "正文")
            with pytest.raises(SharedDatabaseError, match="删除共享文档"):
                await docs.delete("a")
        assert work.running == 4
    finally:
        gate.set()
        await work.settle()
    assert work.running == 0


async def test_memory_auto_replies_with_the_reason_when_the_switch_cannot_be_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from amrita_plugin_memory.storage import consent_store
    from amrita_plugin_memory.storage.consent_store import ConsentStore
    from amrita_plugin_memory.storage.keys import target_from_ids
    from amrita_plugin_memory.storage.scope import ScopeRules
    from amrita_plugin_memory.storage.shared.sessions import SharedWork
    from amrita_plugin_memory.tools.commands import CommandRequest, MemoryCommands
    from tests.helpers import runtime

    class Switch:  # what /memory auto needs of active memory, over the real consent store
        enabled = True

        def __init__(self, consent: ConsentStore) -> None:
            self.allows = consent.allows
            self.set_consent = consent.set_allowed

    gate = asyncio.Event()
    monkeypatch.setattr(consent_store, "orm_session", lambda: _Hung(gate))
    work = SharedWork(0.3)
    commands = MemoryCommands(runtime().tools, auto=Switch(ConsentStore(work)))
    scope = ScopeRules().of_turn(target_from_ids("30541"))
    try:
        async with asyncio.timeout(5):
            for action in ("show", "off", "on"):
                reply = await commands.run(CommandRequest("auto", action, ""), scope)
                assert reply.startswith("读取自动记忆开关：共享数据库 0.3 秒内没有完成"), reply
    finally:
        gate.set()
        await work.settle()
