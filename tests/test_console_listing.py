"""The console's building blocks on a real store (embedded and remote ChromaDB).

* ``storage/partition/listing`` pages a partition newest first from a cached id list that
  the store's own writes keep exact, and re-reads it when it is old;
* ``infra/gate.WriteGate``: maintenance refuses new writes at once and waits for
  running ones, which nothing in between may lose;
* ``infra/bot_link``: the token file is 0600, round-trips, ignores garbage and a
  dead bot's file.
"""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from tests.lazy import lazy_import

L = lazy_import(
    "amrita_plugin_memory.storage.partition.listing",
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
        await store.add(P, "user", f"m{i}")
    await store.add(OTHER, "user", "other partition")
    assert await _ids(store, P, limit=3) == ["m6", "m5", "m4"]
    assert await _ids(store, P, offset=6, limit=3) == ["m0"]
    assert await _ids(store, P, offset=7, limit=3) == []
    records, total = await L.newest_page(store, P, limit=2)
    assert total == 7 and all(r.partition == P for r in records)

    # Writes through the store change the cached list without a re-read.
    added = await store.add(P, "user", "m7")
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
    await store.add(P, "user", "before")
    async with gate.closed("重映射"):
        with pytest.raises(L.MaintenanceInProgress, match="正在重映射"):
            await store.add(P, "user", "during")
        first = (await L.newest_page(store, P, limit=5))[0][0]
        with pytest.raises(L.MaintenanceInProgress):
            await store.update(P, first.id, importance="high")
        with pytest.raises(L.MaintenanceInProgress):
            await store.delete(P, first.id)
        with pytest.raises(L.MaintenanceInProgress):  # never two at once
            async with gate.closed("恢复备份"):
                pass
    assert [r.content for r in (await L.newest_page(store, P, limit=5))[0]] == ["before"]
    assert (await store.get(P, first.id)).importance == "medium"


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
