"""Closing the store for real, re-embedding that verifies itself, remaps while the bot writes.

* ``ChromaConnection.close()`` closes the chromadb client before it releases
  the data-dir lock; a store reopened after another process wrote finds that
  process's records by vector search (the root cause of "restored memories
  are listed but never found", issue 12 item 1), and the admin client used for
  a remote tenant/database is released at once (item 2).
* A re-embedding whose result cannot be found by vector search in a fresh
  client fails clearly and writes no fingerprint (item 1).
* A collection that vanished is never re-created empty (item 8).
* Cancelling a remap is never swallowed by its pipeline (item 14).
* ``reindex`` and ``restore`` on a real ``chroma run`` finish while the bot
  keeps writing, and every write acknowledged with ``ok: true`` survives
  (item 8).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.botproject import (
    ALICE,
    BGE,
    NOMIC,
    collection_meta,
    make_runtime,
    memory_meta,
    sample_knowledge,
    sample_memories,
    seed,
    snapshot,
)
from tests.helpers import new_memory, view_of
from tests.lazy import lazy_import
from tests.reliability_stats import STATS
from tests.servers import ChromaEndpoint, ChromaProxy, ChromaServer, EmbeddingServer, embed_text

E = lazy_import(
    "amrita_plugin_memory.embedding",
    "amrita_plugin_memory.embedding.remap",
    "amrita_plugin_memory.embedding.rebuild",
    "amrita_plugin_memory.embedding.maintenance",
    "amrita_plugin_memory.core.errors",
    "amrita_plugin_memory.storage.chroma.paging",
)
T = lazy_import(
    "amrita_plugin_memory.storage.keys",
    "amrita_plugin_memory.tools.memory_tools",
    "amrita_plugin_memory.storage.scope",
)

_OTHER_PROCESS_WRITE = """
import json, sys
import chromadb
from chromadb.config import Settings
path, name, record = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
client = chromadb.PersistentClient(path=path, settings=Settings(anonymized_telemetry=False))
col = client.get_collection(name, embedding_function=None)
seen = col.get(include=[])["ids"]
col.add(ids=[record["id"]], documents=[record["document"]], embeddings=[record["vector"]],
        metadatas=[record["metadata"]])
client.close()
print(json.dumps(seen))
"""


def _caller() -> Any:
    return T.ScopeRules().of_chat(T.target_from_ids(10001))  # partition ALICE


# ---------------------------------------------------------------------------
# close() and the root cause of "listed but not found"
# ---------------------------------------------------------------------------


async def test_reopened_store_finds_what_another_process_wrote(
    tmp_path: Path, embed_server: EmbeddingServer
) -> None:
    rt = make_runtime(tmp_path)
    try:
        first = await rt.store.add(new_memory(ALICE, "user", "用户喜欢吃草莓蛋糕"))
        hits = await rt.store.query(view_of(ALICE), "用户喜欢吃草莓蛋糕", top_k=1)
        assert [h.id for h in hits] == [first.id]  # this process has indexed the collection
        rt.connection.close()
        rt.connection.close()  # twice: harmless

        # Meanwhile another process (a maintenance command, the bot restarted)
        # writes into the same embedded store; it can open it: the lock is free.
        text = "用户的猫叫做团子"
        record = {
            "id": "from-other-process",
            "document": text,
            "vector": embed_text(text, 384),
            "metadata": memory_meta(ALICE),
        }
        proc = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-c", _OTHER_PROCESS_WRITE, str(rt.connection.chroma_dir),
             rt.store.name, json.dumps(record)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout.strip().splitlines()[-1]) == [first.id]  # saw our write
        STATS.faults_injected += 1

        # This process reopens the store lazily. Before the fix chromadb handed
        # back the old System, whose vector index had never seen the new record:
        # the listing showed it, the search raised "Error finding id".
        assert {r.id for r in await rt.store.list(view_of(ALICE))} == {
            first.id,
            "from-other-process",
        }
        hits = await rt.store.query(view_of(ALICE), text, top_k=1)
        assert [h.id for h in hits] == ["from-other-process"]
        STATS.items_lost += 0 if hits else 1

        # Reopened means locked again: a second connection is refused.
        other = make_runtime(tmp_path)
        with pytest.raises(E.DataDirLocked):
            await other.store.count_all()
        await other.close()
    finally:
        await rt.close()
        await rt.close()  # shutdown hooks may run twice


async def test_remote_admin_client_is_released(
    tmp_path: Path, embed_server: EmbeddingServer, chroma_server: ChromaServer
) -> None:
    """A named database needs chromadb's AdminClient once; its System must not linger.

    Reaches into chromadb's ``SharedSystemClient`` on purpose: if chromadb
    changes how it keeps Systems, this fails loudly (see ``_release_admin``).
    Counted are the reference-counted (running) Systems: an ``HttpClient``
    holds two (its own and its internal admin client's).
    """
    from chromadb.api.shared_system_client import SharedSystemClient

    def running() -> set[str]:
        return set(SharedSystemClient._identifier_to_refcount)

    before = running()
    rt = make_runtime(
        tmp_path,
        mode="remote",
        chroma=chroma_server,
        vector_db_database=f"db_{uuid.uuid4().hex[:8]}",
    )
    try:
        await rt.connection.client()
        assert len(running() - before) == 2  # the client's two; the AdminClient's is gone
        rt.connection.close()
        assert running() - before == set()  # really closed
        assert await rt.store.count_all() == 0  # and reopened lazily
    finally:
        await rt.close()
    assert running() - before == set()


# ---------------------------------------------------------------------------
# A vanished collection is never re-created empty
# ---------------------------------------------------------------------------


async def test_a_vanished_collection_is_never_recreated(
    tmp_path: Path, embed_server: EmbeddingServer
) -> None:
    rt = make_runtime(tmp_path)
    conn, name = rt.connection, rt.store.name
    try:
        await rt.store.add(new_memory(ALICE, "user", "第一条记忆"))
        # A remap between its delete and its rename: the temporary exists, the name does not.
        await conn.create_collection(name + "__reembed", {"reembed_complete": True})
        await conn.delete_collection(name)
        STATS.faults_injected += 1
        with pytest.raises(E.MaintenanceInProgress):
            await rt.store.add(new_memory(ALICE, "user", "第二条记忆"))
        result = await rt.tools.write_memory(_caller(), {"content": "第三条记忆", "tags": ["测试"]})
        assert result == {"ok": False, "error": "记忆库维护中，请稍后再试（本次操作未执行）"}
        assert name not in await conn.list_collections()

        # Gone for good (no remap running): an error, and still nothing re-created.
        await conn.delete_collection(name + "__reembed")
        STATS.faults_injected += 1
        with pytest.raises(E.VectorStoreError, match="不存在"):
            await rt.store.add(new_memory(ALICE, "user", "第四条记忆"))
        assert name not in await conn.list_collections()
    finally:
        await rt.close()


# ---------------------------------------------------------------------------
# Cancellation (item 14)
# ---------------------------------------------------------------------------


async def test_cancelling_a_remap_is_never_swallowed(
    tmp_path: Path, embed_server: EmbeddingServer
) -> None:
    """The pipeline's pending step is cancelled on failure; our own cancellation must survive."""
    rt = make_runtime(tmp_path, reembed_batch_size=64)
    never = asyncio.Event()
    items = [E.Item(f"c{i:03d}", f"第 {i} 条", memory_meta(ALICE)) for i in range(256)]

    async def pages() -> AsyncIterator[list[Any]]:
        yield items  # one full chunk (one embedded add)
        await never.wait()  # the next page never comes: the pending step hangs
        yield []

    def progress(done: int, total: int) -> None:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()  # someone cancels the remap (shutdown)...
        raise RuntimeError("progress display broke")  # ...while it fails for its own reason

    try:
        plan = E.Plan(E.Covered("cancel-probe", "memory"), len(items), {}, None, pages)
        target = await E.current_fingerprint(rt.embedder)
        task = asyncio.create_task(
            E.build_temp(rt.maintenance, plan, target, [0], len(items), progress)
        )
        with pytest.raises(asyncio.CancelledError):
            await task
        assert task.cancelled()
        STATS.faults_injected += 1
    finally:
        await rt.close()


# ---------------------------------------------------------------------------
# Verification in a fresh client (item 1)
# ---------------------------------------------------------------------------


def _drop_vector_log(chroma_dir: Path, collection: str) -> int:
    """Delete a collection's write-ahead log rows: its vector index cannot be rebuilt."""
    with contextlib.closing(sqlite3.connect(chroma_dir / "chroma.sqlite3")) as db, db:
        row = db.execute("select id from collections where name = ?", (collection,)).fetchone()
        assert row is not None
        cur = db.execute("delete from embeddings_queue where topic like ?", (f"%{row[0]}",))
        return cur.rowcount


async def test_a_remap_whose_vectors_cannot_be_found_fails_and_keeps_the_fingerprint(
    tmp_path: Path, embed_server: EmbeddingServer
) -> None:
    old = make_runtime(tmp_path, embedding_model_name=NOMIC)
    await seed(old, old.store.name, sample_memories(30))
    await E.reset_fingerprint(old.maintenance)
    before = await snapshot(old, old.store.name)
    await old.close()

    rt = make_runtime(tmp_path, embedding_model_name=BGE)
    dropped: list[int] = []

    def progress(done: int, total: int) -> None:
        # The embedded index the remap wrote is lost before anyone reopens it
        # (what "the next process does not load what the CLI wrote" looks like).
        if done == total:
            dropped.append(_drop_vector_log(rt.connection.chroma_dir, rt.store.name + "__reembed"))

    try:
        with pytest.raises(E.RemapFailed, match="检索校验失败") as info:
            await E.remap(rt.maintenance, progress=progress)
        assert dropped and dropped[0] > 0
        STATS.faults_injected += 1
        assert "嵌入指纹未改动" in str(info.value)
        assert await rt.connection.list_collections() == [rt.store.name]
        after = await snapshot(rt, rt.store.name)
        STATS.items_lost += len(set(before) - set(after))
        assert after == before
        assert (await E.stored_fingerprint(rt.store)).model == NOMIC
        # The "running" marker is gone: the bot may write again.
        assert not (await collection_meta(rt, rt.store.name)).get("reembed_running")
    finally:
        await rt.close()


# ---------------------------------------------------------------------------
# Remote remaps while the bot keeps writing (item 8)
# ---------------------------------------------------------------------------


@dataclass
class _Writes:
    """What a busy bot did: acknowledged adds and deletes, refusals, anything else."""

    deletable: list[str]
    added: dict[str, str] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)
    refused: int = 0
    ambiguous: int = 0
    errors: list[str] = field(default_factory=list)
    acked: asyncio.Event = field(default_factory=asyncio.Event)
    """Set whenever an add is acknowledged."""
    calls: int = 0
    """Tool calls answered so far."""
    answered: asyncio.Event = field(default_factory=asyncio.Event)
    """Set whenever a tool call is answered."""

    async def until_added(self, count: int) -> None:
        while len(self.added) < count:
            self.acked.clear()
            await self.acked.wait()

    async def until_calls(self, count: int) -> None:
        while self.calls < count:
            self.answered.clear()
            await self.answered.wait()


async def _busy_bot(rt: Any, writes: _Writes, stop: asyncio.Event) -> None:
    """Write (and now and then delete) memories through the tools until ``stop``."""
    caller = _caller()
    n = 0
    while not stop.is_set():
        n += 1
        if n % 4 == 0 and writes.deletable:
            memory_id = writes.deletable.pop()
            result = await rt.tools.delete_memory(caller, {"id": memory_id})
            if result["ok"]:
                writes.deleted.append(memory_id)
            else:
                writes.deletable.append(memory_id)
        else:
            content = f"并发写入的记忆 {n}"
            result = await rt.tools.write_memory(caller, {"content": content, "tags": ["并发"]})
            if result["ok"]:
                writes.added[result["memory"]["id"]] = content
                writes.acked.set()
        if not result["ok"]:
            if "可能未生效" in result["error"]:
                writes.ambiguous += 1
            elif "记忆库维护中，请稍后再试" in result["error"]:
                writes.refused += 1
            else:
                writes.errors.append(result["error"])
        writes.calls += 1
        writes.answered.set()
        await asyncio.sleep(0.02)


async def _release_after_a_hit(proxy: ChromaProxy, writes: _Writes) -> None:
    """Keep the held drop going until a tool call of the bot met it and was answered."""
    await proxy.wait_held()
    while proxy.drop_answers == 0:
        await writes.until_calls(writes.calls + 1)
    # The call that met the drop is answered at the latest with the next one.
    await writes.until_calls(writes.calls + 1)
    proxy.release_drop()


async def _while_busy(
    rt_bot: Any, writes: _Writes, maintenance: Any, proxy: ChromaProxy | None = None
) -> Any:
    """Run ``maintenance`` while the bot writes; the bot must write again afterwards.

    With ``proxy`` (armed with ``hold_drop``), the swap's drop of the memory
    collection lasts until the bot's reads and writes have met it.
    """
    stop = asyncio.Event()
    bot = asyncio.create_task(_busy_bot(rt_bot, writes, stop))
    releaser = asyncio.create_task(_release_after_a_hit(proxy, writes)) if proxy else None
    try:
        async with asyncio.timeout(120):  # hang guard only
            await writes.until_added(5)
            report = await maintenance
            if releaser is not None:
                await releaser
            await writes.until_added(len(writes.added) + 1)  # writes resume after the remap
    finally:
        if proxy is not None:
            proxy.release_drop()
        if releaser is not None and not releaser.done():
            releaser.cancel()
        stop.set()
        await bot
    return report


async def _remote_pair(
    tmp_path: Path, chroma: ChromaEndpoint, memories: int
) -> tuple[Any, Any, dict[str, str]]:
    """A "bot" and a "CLI" runtime on the same remote collections (separate clients)."""
    suffix = uuid.uuid4().hex[:8]
    names = {"memory_name": f"mem-{suffix}", "knowledge_name": f"know-{suffix}"}
    cli = make_runtime(tmp_path / "cli", mode="remote", chroma=chroma, **names)
    await seed(cli, names["memory_name"], sample_memories(memories))
    await seed(cli, names["knowledge_name"], sample_knowledge(3))
    await E.reset_fingerprint(cli.maintenance)
    bot = make_runtime(tmp_path / "bot", mode="remote", chroma=chroma, **names)
    bot.tools.memory_limit = 100_000
    return cli, bot, names


async def _drop_remote(rt: Any, names: dict[str, str]) -> None:
    for name in await rt.connection.list_collections():
        if name.startswith(tuple(names.values())):
            await rt.connection.delete_collection(name)


async def test_remote_reindex_finishes_while_the_bot_writes(
    tmp_path: Path, embed_server: EmbeddingServer, chroma_proxy: ChromaProxy
) -> None:
    """A reindex finishes while the bot writes; nothing acknowledged is lost.

    The swap's drop of the memory collection is held by the proxy until the
    bot's calls have met it: each is refused ("记忆库维护中") or retried on the
    new collection, never answered with Chroma's error of a collection being dropped.
    """
    cli, bot, names = await _remote_pair(tmp_path, chroma_proxy, 40)
    writes = _Writes(deletable=[f"m{i:04d}" for i in range(40)])
    try:
        chroma_proxy.hold_drop(names["memory_name"])
        report = await _while_busy(bot, writes, E.remap(cli.maintenance), chroma_proxy)
        STATS.faults_injected += 1
        assert chroma_proxy.drop_answers > 0  # the bot met the collection being dropped
        assert report.backup is not None  # completed (it used to abort on any write)
        after = await snapshot(cli, names["memory_name"])
        lost = [i for i in writes.added if i not in after]
        resurrected = [i for i in writes.deleted if i in after]
        STATS.items_lost += len(lost) + len(resurrected)
        assert not lost and not resurrected
        assert all(after[i][0] == text for i, text in writes.added.items())
        assert writes.refused > 0 and not writes.errors, writes
        assert report.counts[names["memory_name"]] > 0
        assert (await E.stored_fingerprint(cli.store)).fingerprint == (
            await E.current_fingerprint(cli.embedder)
        ).fingerprint
        # The bot's deletes went into the memory collection's archive (remapped too).
        assert writes.deleted
        archive = names["memory_name"] + "_archive"
        assert sorted(n for n in await cli.connection.list_collections() if names["memory_name"] in n or names["knowledge_name"] in n) == sorted([*names.values(), archive])  # fmt: skip
        assert set(writes.deleted) <= set(await snapshot(cli, archive))
    finally:
        await _drop_remote(cli, names)
        await bot.close()
        await cli.close()


async def test_remote_restore_finishes_while_the_bot_writes(
    tmp_path: Path, embed_server: EmbeddingServer, chroma_proxy: ChromaProxy
) -> None:
    """A restore rolls the store back to the file and finishes; nothing acknowledged is lost.

    Writes acknowledged before the restore took over are in the backup it
    makes of the current contents; later ones are in the restored store. The
    swap's drop is held until the bot met it, as in the reindex test (issue 32:
    a write once got Chroma's "Missing metadata segment" there, by chance).
    """
    cli, bot, names = await _remote_pair(tmp_path, chroma_proxy, 30)
    writes = _Writes(deletable=[f"m{i:04d}" for i in range(30)])
    try:
        source = await E.create_backup(cli.maintenance)
        _, contents = E.load_backup(source.path)
        chroma_proxy.hold_drop(names["memory_name"])
        restore = E.restore_backup(cli.maintenance, source.path)
        report = await _while_busy(bot, writes, restore, chroma_proxy)
        STATS.faults_injected += 1
        assert chroma_proxy.drop_answers > 0  # the bot met the collection being dropped
        after = await snapshot(cli, names["memory_name"])
        assert report.backup is not None
        _, saved = E.load_backup(report.backup)
        kept = {i.id: i.document for i in saved[names["memory_name"]].items}
        # Nothing acknowledged is lost: a write landed either before the restore
        # took over (then it is in the restore's own backup) or after it (then it
        # is in the store); a delete likewise left one of them without the memory.
        lost = [
            i
            for i, text in writes.added.items()
            if kept.get(i) != text and (after.get(i) or (None,))[0] != text
        ]
        resurrected = [i for i in writes.deleted if i in kept and i in after]
        STATS.items_lost += len(lost) + len(resurrected)
        assert not lost and not resurrected
        # Apart from what the bot did afterwards, the store is exactly the file.
        restored = {i.id: (i.document, i.metadata) for i in contents[names["memory_name"]].items}
        assert {i: v for i, v in after.items() if i not in writes.added} == {
            i: v for i, v in restored.items() if i in after or i not in writes.deleted
        }
        assert writes.refused > 0 and not writes.errors, writes
    finally:
        await _drop_remote(cli, names)
        await bot.close()
        await cli.close()
