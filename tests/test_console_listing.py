"""The console's building blocks on a real store (embedded and remote ChromaDB).

* ``upkeep/listing`` pages a partition newest first from a cached id list that
  the store's own writes keep exact, and re-reads it when it is old;
* ``infra/gate.WriteGate``: maintenance refuses new writes at once and waits for
  running ones, which nothing in between may lose;
* the console's caches: a scan running when they are invalidated is not kept;
* ``infra/bot_link``: the token file is 0600, round-trips, ignores garbage and a
  dead bot's file, and refuses a running bot that does not answer.
"""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import new_memory, view_of
from tests.lazy import lazy_import

L = lazy_import(
    "amrita_plugin_memory.upkeep.listing",
    "amrita_plugin_memory.infra.gate",
    "amrita_plugin_memory.infra.bot_link",
)
P = "QQPlatform_Private_31337"
OTHER = "QQPlatform_Private_31338"


async def _ids(store: Any, partition: str, **kw: Any) -> list[str]:
    records, _ = await L.newest_page(store, partition, **kw)
    return [r.content for r in records]


async def test_newest_first_pages_follow_the_stores_writes(store: Any) -> None:
    for i in range(7):
        await store.add(new_memory(P, "user", f"m{i}"))
    await store.add(new_memory(OTHER, "user", "other partition"))
    assert await _ids(store, P, limit=3) == ["m6", "m5", "m4"]
    assert await _ids(store, P, offset=6, limit=3) == ["m0"]
    assert await _ids(store, P, offset=7, limit=3) == []
    records, total = await L.newest_page(store, P, limit=2)
    assert total == 7 and all(r.partition == P for r in records)

    # Writes through the store change the cached list without a re-read.
    added = await store.add(new_memory(P, "user", "m7"))
    assert await _ids(store, P, limit=2) == ["m7", "m6"]
    assert await store.delete(P, added.id)
    assert await _ids(store, P, limit=2) == ["m6", "m5"]
    await store.update(P, records[0].id, content="m6 changed")
    assert await _ids(store, P, limit=1) == ["m6 changed"]

    # A write the store did not see (another process) shows after the list is old.
    col = await store.collection()
    vector = (await store.embedder.embed(["outside"]))[0]
    meta = {**records[1].to_metadata(), "created_at": "later"}
    await store.connection.run(
        lambda: col.add(
            ids=["outside"], documents=["outside"], embeddings=[vector], metadatas=[meta]
        )
    )
    assert (await L.newest_page(store, P, limit=1))[1] == 7  # cached list, not re-read yet
    store.recent.ttl = 0.0
    assert (await L.newest_page(store, P, limit=1))[1] == 7  # old: answered from the list…
    refresh = L._refreshing.get((id(store), P))  # …and re-read in the background
    if refresh is not None:  # (None: the re-read has already finished)
        async with asyncio.timeout(10):  # hang guard
            await refresh
    assert (await L.newest_page(store, P, limit=1))[1] == 8
    assert await _ids(store, P, limit=1) == ["outside"]
    located = await L.locate(store, "outside")
    assert located is not None and located.partition == P
    assert await L.locate(store, "missing") is None


async def test_write_gate_refuses_writes_during_maintenance(store: Any) -> None:
    gate = store.gate
    await store.add(new_memory(P, "user", "before"))
    async with gate.closed("重映射"):
        with pytest.raises(L.MaintenanceInProgress, match="正在重映射"):
            await store.add(new_memory(P, "user", "during"))
        first = (await L.newest_page(store, P, limit=5))[0][0]
        with pytest.raises(L.MaintenanceInProgress):
            await store.update(P, first.id, importance="high")
        with pytest.raises(L.MaintenanceInProgress):
            await store.delete(P, first.id)
        with pytest.raises(L.MaintenanceInProgress):  # never two at once
            async with gate.closed("恢复备份"):
                pass
    assert [r.content for r in (await L.newest_page(store, P, limit=5))[0]] == ["before"]
    assert (await store.get(view_of(P), first.id)).importance == "medium"


async def test_write_gate_waits_for_running_writes() -> None:
    gate = L.WriteGate()
    order: list[str] = []
    release = asyncio.Event()

    async def writer() -> None:
        async with gate.writing():
            order.append("write started")
            await release.wait()
            order.append("write done")

    async def maintenance() -> None:
        async with gate.closed("恢复备份"):
            order.append("maintenance")

    task = asyncio.create_task(writer())
    await asyncio.sleep(0)
    job = asyncio.create_task(maintenance())
    await asyncio.sleep(0.01)
    assert order == ["write started"] and gate.closed_for == "恢复备份"
    release.set()
    async with asyncio.timeout(5):  # hang guard
        await asyncio.gather(task, job)
    assert order == ["write started", "write done", "maintenance"]
    assert gate.closed_for is None


def test_token_file(tmp_path: Path) -> None:
    endpoint = L.write_token_file(tmp_path, "0.0.0.0", 8080)
    path = tmp_path / L.TOKEN_FILE_NAME
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert L.read_token_file(tmp_path) == endpoint and endpoint.pid == os.getpid()
    assert endpoint.base_url == "http://127.0.0.1:8080" and endpoint.token not in repr(endpoint)
    assert L.BotEndpoint("t", "::", 1, 1).base_url == "http://[::1]:1"
    lock = tmp_path / "lock"
    lock.write_text(str(os.getpid()))
    assert L.running_bot(tmp_path, lock) == endpoint
    lock.write_text("1")  # the data dir is held by another process than the token's
    assert L.running_bot(tmp_path, lock) is None
    assert not L.token_matches(endpoint.token, endpoint.token[:-1] + "x")
    assert not L.token_matches(endpoint.token, None)

    L.remove_token_file(tmp_path, "another bot's token")
    assert path.exists()
    L.remove_token_file(tmp_path, endpoint.token)
    assert not path.exists()
    for garbage in (
        "",
        "{",
        "[]",
        '{"format": "x"}',
        '{"format": "amrita_plugin_memory/console_token"}',
    ):
        path.write_text(garbage)
        assert L.read_token_file(tmp_path) is None


def test_serving_bot_tells_a_silent_bot_from_a_left_file(tmp_path: Path) -> None:
    """Remote mode: no file or a gone process → no bot; the process still running but its
    address refusing → a clear error (the command must not race it); listening → the bot."""
    import json
    import socket

    def write(pid: int, port: int, started: str | None) -> None:
        document = {
            "format": "amrita_plugin_memory/console_token",
            "token": "t",
            "host": "127.0.0.1",
            "port": port,
            "pid": pid,
            "started": started,
        }
        (tmp_path / L.TOKEN_FILE_NAME).write_text(json.dumps(document), encoding="utf-8")

    me = os.getpid()
    assert L.serving_bot(tmp_path) is None  # no file
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        free = server.getsockname()[1]  # bound, not listening: connections are refused
        write(me, free, L.process_start(me))
        with pytest.raises(L.BotLinkError, match=f"Bot 正在运行（PID {me}），但它的管理接口"):
            L.serving_bot(tmp_path, timeout=1)
        write(me, free, None)  # a file that does not say when its process started
        with pytest.raises(L.BotLinkError, match="无法连接"):
            L.serving_bot(tmp_path, timeout=1)
        write(me, free, "another-boot:1")  # the PID now belongs to another process
        assert L.serving_bot(tmp_path, timeout=1) is None
        server.listen()
        write(me, free, L.process_start(me))
        assert L.serving_bot(tmp_path, timeout=1) == L.read_token_file(tmp_path)
    assert L.process_start(me) is not None and L.process_start(me) == L.process_start(me)


async def test_a_scan_running_at_an_invalidation_is_not_kept(store: Any) -> None:
    """A forget (or any write) invalidates the console's caches while a scan runs: the
    scan answers the request it was made for, but the next request scans again."""
    from amrita_plugin_memory.console.catalog import PartitionCatalog

    entered, release = asyncio.Event(), asyncio.Event()
    scans: list[int] = []

    class Paused(PartitionCatalog):
        async def _scan(self) -> Any:
            result = await super()._scan()  # read before the write below
            scans.append(1)
            if len(scans) == 1:
                entered.set()
                await release.wait()
            return result

    await store.add(new_memory(P, "user", "m"))
    catalog = Paused(store)
    task = asyncio.create_task(catalog.get())
    await asyncio.wait_for(entered.wait(), 10)
    await store.add(new_memory(OTHER, "user", "written while the scan ran"))
    catalog.invalidate()
    release.set()
    assert set((await task).partitions) == {P}
    assert set((await catalog.get()).partitions) == {P, OTHER}
    assert len(scans) == 2


async def test_a_status_computed_at_an_invalidation_is_not_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from amrita_plugin_memory.console import status as status_module
    from tests.helpers import runtime

    real = status_module.collect_status
    entered, release = asyncio.Event(), asyncio.Event()
    calls: list[int] = []

    async def paused(maint: Any) -> Any:
        report = await real(maint)
        calls.append(1)
        if len(calls) == 1:
            entered.set()
            await release.wait()
        return report

    monkeypatch.setattr(status_module, "collect_status", paused)
    cache = status_module.StatusCache(runtime().maintenance)
    task = asyncio.create_task(cache.get())
    await asyncio.wait_for(entered.wait(), 30)
    cache.invalidate()
    release.set()
    await task
    await cache.get()
    assert len(calls) == 2  # computed again: the first may hold what the write changed
