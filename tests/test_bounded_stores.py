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
    monkeypatch.setattr(window_store, "orm_session", lambda: _Hung(gate))
    work = SharedWork(0.3)
    windows = GroupWindowStore(GroupContextConfig(), work=work)
    windows.append("9001", "30471", "甲", "早上好", is_bot=False, at=1.0)
    try:
        async with asyncio.timeout(5):
            with pytest.raises(SharedDatabaseError, match="读取群上下文窗口"):
                await windows.recent("9001", 10)
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
