"""Embedding fingerprint, startup check, safe remap and backups (in-process, real servers)."""

from __future__ import annotations

import functools
import hashlib
import json
import stat
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.botproject import (
    ALICE,
    BGE,
    GROUP,
    NOMIC,
    collection_meta,
    dims,
    make_runtime,
    memory_meta,
    sample_knowledge,
    sample_memories,
    seed,
    snapshot,
)
from tests.helpers import new_memory, view_of
from tests.lazy import lazy_import
from tests.servers import ChromaServer, EmbeddingServer

E = lazy_import(
    "amrita_plugin_memory.embedding",
    "amrita_plugin_memory.embedding.remap",
    "amrita_plugin_memory.embedding.rebuild",
    "amrita_plugin_memory.core.errors",
)
K = lazy_import(
    "amrita_plugin_memory.storage.keys",
    "amrita_plugin_memory.adapters.events",
    "amrita_plugin_memory.upkeep.rekey",
)
REBUILD = "amrita_plugin_memory.embedding.rebuild"
MEM = "amrita_user_memory"
KNOW = "amrita_global_knowledge"


class Killed(BaseException):
    """Stands for the process being killed at an exact instant."""


@pytest.fixture
async def runtimes(embed_server: EmbeddingServer) -> AsyncIterator[Callable[..., Any]]:
    """Factory of runtimes, all closed at the end of the test."""
    made: list[Any] = []

    def factory(data_dir: Path, **kwargs: Any) -> Any:
        rt = make_runtime(data_dir, **kwargs)
        made.append(rt)
        return rt

    yield factory
    for rt in made:
        await rt.close()


async def _seeded(
    runtimes: Callable[..., Any], data: Path, *, memories: int = 20, knowledge: int = 5, **kw: Any
) -> Any:
    """A runtime (nomic, 384-dim) with memories + knowledge, fingerprint and key format recorded."""
    rt = runtimes(data, embedding_model_name=NOMIC, **kw)
    await seed(rt, rt.store.name, sample_memories(memories))
    if knowledge:
        await seed(
            rt, rt.config.file.subconscious.knowledge_collection_name, sample_knowledge(knowledge)
        )
    await E.reset_fingerprint(rt.maintenance)
    await K.migrate_partition_keys(rt.store)
    return rt


def _real(name: str = "amrita_plugin_memory.embedding.remap") -> Any:
    """A module itself (monkeypatching the lazy proxy would patch nothing)."""
    import importlib

    return importlib.import_module(name)


def _never_called(question: str) -> bool:
    raise AssertionError(f"confirm must not be called: {question}")


# ---------------------------------------------------------------------------
# Fingerprint
# ---------------------------------------------------------------------------


async def test_fingerprint_is_sha256_of_protocol_model_url(
    tmp_path: Path, runtimes: Callable[..., Any], embed_server: EmbeddingServer
) -> None:
    expected = hashlib.sha256(f"ollama-embed|{NOMIC}|{embed_server.url}".encode()).hexdigest()
    assert E.compute_fingerprint("ollama-embed", NOMIC, embed_server.url) == expected
    rt = runtimes(tmp_path, embedding_model_name="auto")  # resolved through /api/tags
    info = await E.current_fingerprint(rt.embedder)
    assert (info.fingerprint, info.protocol, info.model, info.base_url) == (
        expected,
        "ollama-embed",
        NOMIC,
        embed_server.url,
    )
    await rt.embedder.close()
    rt2 = runtimes(tmp_path / "b", embedding_model_name=BGE, embedding_proctol="openai")
    assert (await E.current_fingerprint(rt2.embedder)).fingerprint == E.compute_fingerprint(
        "openai", BGE, embed_server.url
    )


def test_fresh_store_records_fingerprint_without_running_loop(
    tmp_path: Path, runtimes: Callable[..., Any]
) -> None:
    """``ambot run`` path: no event loop is running while plugins load."""
    rt = runtimes(tmp_path, embedding_model_name="auto", embed_mismatch_policy="ask")
    result = E.run_startup_check(rt.maintenance, interactive=False, confirm=_never_called)
    assert (result.ok, result.action) == (True, "fresh")
    assert result.current.model == NOMIC
    assert rt.embedder._session is None  # the private loop's HTTP session was closed
    again = E.run_startup_check(rt.maintenance, interactive=False, confirm=_never_called)
    assert (again.ok, again.action) == (True, "fresh")  # still empty
    assert again.migration is not None and again.migration.skipped


async def test_fresh_store_inside_running_loop_writes_metadata(
    tmp_path: Path, runtimes: Callable[..., Any], embed_server: EmbeddingServer
) -> None:
    rt = runtimes(tmp_path, embedding_model_name=NOMIC, embed_mismatch_policy="ask")
    result = E.run_startup_check(rt.maintenance, interactive=False, confirm=_never_called)
    assert (result.ok, result.action) == (True, "fresh")
    meta = await collection_meta(rt, MEM)
    assert meta["embedding_fingerprint"] == E.compute_fingerprint(
        "ollama-embed", NOMIC, embed_server.url
    )
    assert (meta["embedding_protocol"], meta["embedding_model"], meta["embedding_base_url"]) == (
        "ollama-embed",
        NOMIC,
        embed_server.url,
    )
    assert meta["partition_key_format"] == "QQPlatform_Private_{id}|QQPlatform_Group_{id}"
    assert KNOW not in await rt.connection.list_collections()  # never created by the check
    await rt.close()


async def test_command_context_and_disabled_check_skip_everything(
    tmp_path: Path, runtimes: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AMBOT_COMMAND_CONTEXT", "1")
    rt = runtimes(tmp_path / "a", embed_mismatch_policy="ask")
    result = E.run_startup_check(rt.maintenance, interactive=False, confirm=_never_called)
    assert (result.ok, result.action) == (True, "skipped")
    monkeypatch.delenv("AMBOT_COMMAND_CONTEXT")
    rt2 = runtimes(tmp_path / "b", embed_check_on_startup=False)
    assert E.run_startup_check(rt2.maintenance, interactive=False).action == "skipped"
    # Nothing was opened: no Chroma client, no lock file, no HTTP session.
    assert rt.connection._client is None and rt2.connection._client is None
    assert not (tmp_path / "a" / "vector_db.chroma").exists()


async def test_legacy_partition_keys_are_migrated_before_the_fingerprint_check(
    tmp_path: Path, runtimes: Callable[..., Any]
) -> None:
    rt = runtimes(tmp_path, embedding_model_name=NOMIC, embed_mismatch_policy="never")
    await seed(
        rt,
        MEM,
        [
            ("a", "旧键个人记忆", memory_meta("user_10001")),
            ("g", "旧键群记忆", memory_meta("group_20001", "group")),
        ],
    )
    result = E.run_startup_check(rt.maintenance, interactive=False)
    assert result.migration.rewritten == 2
    snap = await snapshot(rt, MEM)
    assert (snap["a"][1] or {})["user_id"] == ALICE and (snap["g"][1] or {})["user_id"] == GROUP
    await rt.close()


# ---------------------------------------------------------------------------
# Mismatch policies
# ---------------------------------------------------------------------------


async def test_policy_never_keeps_data_and_old_fingerprint(
    tmp_path: Path, runtimes: Callable[..., Any]
) -> None:
    old = await _seeded(runtimes, tmp_path)
    before = await snapshot(old, MEM)
    old_meta = await collection_meta(old, MEM)
    old.connection.close()
    rt = runtimes(tmp_path, embedding_model_name=BGE, embed_mismatch_policy="never")
    result = E.run_startup_check(rt.maintenance, interactive=True, confirm=_never_called)
    assert (result.ok, result.action) == (True, "kept")
    assert "ambot memory reindex" in result.message
    assert result.stored.model == NOMIC and result.current.model == BGE
    assert await snapshot(rt, MEM) == before
    assert (await collection_meta(rt, MEM))["embedding_fingerprint"] == old_meta[
        "embedding_fingerprint"
    ]
    assert await dims(rt, MEM) == {384}
    assert not rt.config.backup_dir.exists()


async def test_policy_ask_without_tty_refuses_cleanly(
    tmp_path: Path, runtimes: Callable[..., Any]
) -> None:
    old = await _seeded(runtimes, tmp_path)
    before = await snapshot(old, MEM)
    old.connection.close()
    rt = runtimes(tmp_path, embedding_model_name=BGE, embed_mismatch_policy="ask")
    result = E.run_startup_check(rt.maintenance, interactive=False, confirm=_never_called)
    assert (result.ok, result.action) == (False, "refused")
    for hint in (
        "EMBED_MISMATCH_POLICY=auto",
        "EMBED_MISMATCH_POLICY=never",
        "ambot memory reindex",
        "Bot 继续运行",
    ):
        assert hint in result.message
    assert await snapshot(rt, MEM) == before
    assert (await E.stored_fingerprint(rt.store)).model == NOMIC


async def test_policy_ask_on_tty_answered_no_keeps_data(
    tmp_path: Path, runtimes: Callable[..., Any]
) -> None:
    old = await _seeded(runtimes, tmp_path)
    old.connection.close()
    rt = runtimes(tmp_path, embedding_model_name=BGE, embed_mismatch_policy="ask")
    questions: list[str] = []
    result = E.run_startup_check(
        rt.maintenance, interactive=True, confirm=lambda q: questions.append(q) or False
    )
    assert (result.ok, result.action) == (True, "kept")
    assert len(questions) == 1 and BGE in questions[0] and "25 条" in questions[0]
    assert await dims(rt, MEM) == {384}


async def test_policy_ask_on_tty_answered_yes_remaps_with_dimension_change(
    tmp_path: Path, runtimes: Callable[..., Any], embed_server: EmbeddingServer
) -> None:
    old = await _seeded(runtimes, tmp_path)
    mem_before, know_before = await snapshot(old, MEM), await snapshot(old, KNOW)
    old.connection.close()
    rt = runtimes(
        tmp_path, embedding_model_name=BGE, embed_mismatch_policy="ask", reembed_batch_size=8
    )
    result = E.run_startup_check(rt.maintenance, interactive=True, confirm=lambda q: True)
    assert (result.ok, result.action) == (True, "remapped"), result.message
    assert result.remap.counts == {MEM: 20, KNOW: 5}
    assert await snapshot(rt, MEM) == mem_before
    assert await snapshot(rt, KNOW) == know_before
    assert await dims(rt, MEM) == {768} and await dims(rt, KNOW) == {768}
    meta = await collection_meta(rt, MEM)
    assert meta["embedding_model"] == BGE
    assert meta["embedding_fingerprint"] == E.compute_fingerprint(
        "ollama-embed", BGE, embed_server.url
    )
    assert meta["partition_key_format"]  # collection metadata carried over
    assert not any(k.startswith("reembed_") for k in meta)
    assert not any(k.startswith("reembed_") for k in await collection_meta(rt, KNOW))
    assert sorted(await rt.connection.list_collections()) == [KNOW, MEM]
    # Search works in the new space through the plugin's own store.
    hits = await rt.store.query(view_of(ALICE), "记忆 m3：用户喜欢第 3 号苹果", top_k=1)
    assert hits[0].id == "m0003" and hits[0].distance == pytest.approx(0, abs=1e-3)
    # A backup was written first, owner-only.
    backups = E.list_backups(rt.config.backup_dir)
    assert len(backups) == 1 and backups[0].counts == {MEM: 20, KNOW: 5}
    assert stat.S_IMODE(backups[0].path.stat().st_mode) == 0o600
    # Next start: everything matches.
    assert (
        E.run_startup_check(rt.maintenance, interactive=False, confirm=_never_called).action
        == "match"
    )


async def test_policy_auto_remaps_knowledge_even_when_memories_are_empty(
    tmp_path: Path, runtimes: Callable[..., Any]
) -> None:
    old = await _seeded(runtimes, tmp_path, memories=0, knowledge=3)
    know_before = await snapshot(old, KNOW)
    old.connection.close()
    rt = runtimes(tmp_path, embedding_model_name=BGE, embed_mismatch_policy="auto")
    result = E.run_startup_check(rt.maintenance, interactive=False, confirm=_never_called)
    assert (result.ok, result.action) == (True, "remapped"), result.message
    assert await snapshot(rt, KNOW) == know_before and await dims(rt, KNOW) == {768}


async def test_unknown_fingerprint_on_existing_data_is_a_mismatch(
    tmp_path: Path, runtimes: Callable[..., Any]
) -> None:
    """Data written by an older plugin (no fingerprint) is not silently trusted."""
    rt = runtimes(tmp_path, embedding_model_name=NOMIC, embed_mismatch_policy="ask")
    await seed(rt, MEM, sample_memories(3))
    result = E.run_startup_check(rt.maintenance, interactive=False)
    assert result.action == "refused" and "未记录" in result.message
    assert "reset-fingerprint" in result.message


# ---------------------------------------------------------------------------
# Failures
# ---------------------------------------------------------------------------


async def test_failure_in_the_middle_of_a_remap_loses_nothing_and_retry_succeeds(
    tmp_path: Path,
    runtimes: Callable[..., Any],
    embed_server: EmbeddingServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Read pages of 7, embed batches of 8, add chunks of 16: batches straddle
    # pages, and the failure hits while the next chunk is embedded ahead of an add.
    monkeypatch.setattr(_real(), "READ_PAGE_SIZE", 7)
    monkeypatch.setattr(_real("amrita_plugin_memory.storage.chroma.paging"), "READ_PAGE_SIZE", 7)
    monkeypatch.setattr(_real(REBUILD), "ADD_BATCH_LOCAL", 16)
    old = await _seeded(runtimes, tmp_path, memories=40, knowledge=6)
    mem_before, know_before = await snapshot(old, MEM), await snapshot(old, KNOW)
    old_fp = (await E.stored_fingerprint(old.store)).fingerprint
    old.connection.close()
    rt = runtimes(
        tmp_path, embedding_model_name=BGE, embed_mismatch_policy="auto", reembed_batch_size=8
    )
    embed_server.set_mode("error500", after=3)  # three batches succeed, then the service breaks
    result = E.run_startup_check(rt.maintenance, interactive=False)
    assert (result.ok, result.action) == (True, "remap_failed")
    assert "HTTP 500" in result.message and "ambot memory reindex" in result.message
    assert await snapshot(rt, MEM) == mem_before and await snapshot(rt, KNOW) == know_before
    assert await dims(rt, MEM) == {384}
    assert (await E.stored_fingerprint(rt.store)).fingerprint == old_fp
    assert sorted(await rt.connection.list_collections()) == [KNOW, MEM]  # temporaries dropped
    backups = E.list_backups(rt.config.backup_dir)
    assert len(backups) == 1 and backups[0].total == 46
    # The old vectors still answer queries in their own space.
    hits = await rt.store.query_vector(view_of(ALICE), [0.0] * 384, top_k=3)
    assert len(hits) == 3
    # The next start retries from a clean state and succeeds.
    embed_server.set_mode("ok")
    retry = E.run_startup_check(rt.maintenance, interactive=False)
    assert retry.action == "remapped", retry.message
    assert await snapshot(rt, MEM) == mem_before and await dims(rt, MEM) == {768}
    assert (await E.stored_fingerprint(rt.store)).model == BGE


async def test_embedding_service_down_with_auto_model_still_loads(
    tmp_path: Path, runtimes: Callable[..., Any]
) -> None:
    old = await _seeded(runtimes, tmp_path, memories=3, knowledge=0)
    old.connection.close()
    dead = "http://127.0.0.1:9"
    rt = runtimes(
        tmp_path, embedding_model_name="auto", embedding_model_url=dead, embed_mismatch_policy="ask"
    )
    result = E.run_startup_check(rt.maintenance, interactive=False, confirm=_never_called)
    assert (result.ok, result.action) == (True, "unavailable")
    assert "无法确定当前嵌入模型" in result.message and result.stored.model == NOMIC
    # A fresh machine without any embedding service starts too.
    fresh = runtimes(tmp_path / "fresh", embedding_model_name="auto", embedding_model_url=dead)
    assert E.run_startup_check(fresh.maintenance, interactive=False).ok


async def test_explicit_model_with_service_down_fails_the_remap_safely(
    tmp_path: Path, runtimes: Callable[..., Any]
) -> None:
    old = await _seeded(runtimes, tmp_path, memories=5, knowledge=0)
    before = await snapshot(old, MEM)
    old.connection.close()
    rt = runtimes(
        tmp_path,
        embedding_model_name=BGE,
        embedding_model_url="http://127.0.0.1:9",
        embed_mismatch_policy="auto",
    )
    result = E.run_startup_check(rt.maintenance, interactive=False)
    assert (result.ok, result.action) == (True, "remap_failed")
    assert (
        await snapshot(rt, MEM) == before and (await E.stored_fingerprint(rt.store)).model == NOMIC
    )


async def test_locked_data_dir_refuses_to_register(
    tmp_path: Path, runtimes: Callable[..., Any]
) -> None:
    holder = runtimes(tmp_path)
    await holder.connection.client()
    rt = runtimes(tmp_path, embed_mismatch_policy="auto")
    result = E.run_startup_check(rt.maintenance, interactive=False)
    assert (result.ok, result.action) == (False, "locked")
    assert "正被另一个进程" in result.message
    holder.connection.close()


@pytest.mark.parametrize("change", ["add", "update", "delete"])
async def test_concurrent_change_during_live_remap_is_carried_over(
    tmp_path: Path, runtimes: Callable[..., Any], change: str
) -> None:
    """Another writer (e.g. a bot on a remote Chroma) changes the store mid-remap.

    The remap no longer aborts (a busy bot could never be re-embedded): its
    catch-up pass re-embeds the change into the new collection.
    """
    old = await _seeded(runtimes, tmp_path, memories=30, knowledge=0)
    old.connection.close()
    rt = runtimes(tmp_path, embedding_model_name=BGE, reembed_batch_size=8)
    real_embed = rt.embedder.embed
    calls = 0

    async def embed_and_write(texts: list[str]) -> list[list[float]]:
        nonlocal calls
        calls += 1
        if calls == 2:  # m0000 was copied with the first page already
            col = await rt.connection.get_collection(MEM, create=False)
            if change == "add":
                write = functools.partial(
                    col.add,
                    ids=["late"],
                    documents=["后来写入"],
                    embeddings=[[0.1] * 384],
                    metadatas=[memory_meta(ALICE)],
                )
            elif change == "update":
                write = functools.partial(
                    col.update, ids=["m0000"], documents=["后来改写"], embeddings=[[0.1] * 384]
                )
            else:
                write = functools.partial(col.delete, ids=["m0000"])
            await rt.connection.run(write)
        return await real_embed(texts)

    rt.embedder.embed = embed_and_write
    report = await E.remap(rt.maintenance)
    snap = await snapshot(rt, MEM)  # the other writer's change is in the new collection
    if change == "add":
        assert len(snap) == 31 and snap["late"][0] == "后来写入"
    elif change == "update":
        assert len(snap) == 30 and snap["m0000"][0] == "后来改写"
    else:
        assert len(snap) == 29 and "m0000" not in snap
    assert report.counts[MEM] == len(snap)
    assert await rt.connection.list_collections() == [MEM]
    assert (await E.stored_fingerprint(rt.store)).model == BGE
    assert await dims(rt, MEM) == {768}  # the late write was re-embedded with the new model


# ---------------------------------------------------------------------------
# Crash safety of the swap
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kill_at", ["after_commit", "after_delete", "before_finalize", "during_build"]
)
async def test_kill_at_any_step_is_recovered_by_the_next_start(
    tmp_path: Path,
    runtimes: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    kill_at: str,
) -> None:
    old = await _seeded(runtimes, tmp_path, memories=20, knowledge=4)
    mem_before, know_before = await snapshot(old, MEM), await snapshot(old, KNOW)
    old.connection.close()
    rt = runtimes(
        tmp_path, embedding_model_name=BGE, embed_mismatch_policy="auto", reembed_batch_size=8
    )

    with monkeypatch.context() as m:
        if kill_at == "after_commit":

            async def killed_swap(*args: Any) -> None:
                raise Killed

            m.setattr(_real(), "swap_collections", killed_swap)
        elif kill_at == "after_delete":
            real_rename = rt.connection.rename_collection

            async def rename(old_name: str, new_name: str) -> None:
                if new_name == MEM:  # knowledge already swapped, memory original deleted
                    raise Killed
                await real_rename(old_name, new_name)

            m.setattr(rt.connection, "rename_collection", rename)
        elif kill_at == "before_finalize":

            async def killed_finalize(*args: Any) -> None:
                raise Killed

            m.setattr(_real(), "finalize_remap", killed_finalize)
        else:
            # A kill while building leaves an incomplete temporary (no cleanup runs).
            async def killed_drop(*args: Any) -> bool:
                raise Killed

            real_build = E.build_temp

            async def build(*args: Any) -> Any:
                await real_build(*args)  # the memory temporary is fully written...
                m.setattr(_real(), "drop_collection", killed_drop)  # ...and no cleanup will run
                raise Killed

            m.setattr(_real(), "build_temp", build)
        with pytest.raises(Killed):
            await E.remap(rt.maintenance)
    await rt.close()

    names = set(await _names(tmp_path, runtimes))
    if kill_at == "after_commit":
        assert {MEM, KNOW, MEM + "__reembed", KNOW + "__reembed"} <= names
    elif kill_at == "after_delete":
        assert MEM not in names and MEM + "__reembed" in names
    elif kill_at == "during_build":
        assert MEM + "__reembed" in names and MEM in names

    nxt = runtimes(tmp_path, embedding_model_name=BGE, embed_mismatch_policy="ask")
    result = E.run_startup_check(nxt.maintenance, interactive=False, confirm=_never_called)
    assert sorted(await nxt.connection.list_collections()) == [KNOW, MEM]
    assert await snapshot(nxt, MEM) == mem_before and await snapshot(nxt, KNOW) == know_before
    if kill_at == "during_build":
        # Not committed: the original is intact; the leftover was dropped; still a mismatch.
        assert (result.ok, result.action) == (False, "refused")
        assert await dims(nxt, MEM) == {384}
    else:
        # Committed: the swap was finished and the new fingerprint written.
        assert (result.ok, result.action) == (True, "match"), result.message
        assert await dims(nxt, MEM) == {768} and await dims(nxt, KNOW) == {768}
        assert not any(k.startswith("reembed_") for k in await collection_meta(nxt, MEM))


async def _names(data: Path, runtimes: Callable[..., Any]) -> list[str]:
    probe = runtimes(data)
    try:
        return await probe.connection.list_collections()
    finally:
        probe.connection.close()


async def test_recovery_uses_the_fingerprint_of_the_vectors_not_the_new_config(
    tmp_path: Path, runtimes: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed after commit, restarted with yet another model: the swap finishes, then mismatch."""
    old = await _seeded(runtimes, tmp_path, memories=5, knowledge=0)
    old.connection.close()
    rt = runtimes(tmp_path, embedding_model_name=BGE)

    async def killed_swap(*args: Any) -> None:
        raise Killed

    with monkeypatch.context() as m:
        m.setattr(_real(), "swap_collections", killed_swap)
        with pytest.raises(Killed):
            await E.remap(rt.maintenance)
    await rt.close()
    nxt = runtimes(
        tmp_path, embedding_model_name="text-embedding-3-small", embed_mismatch_policy="never"
    )
    result = E.run_startup_check(nxt.maintenance, interactive=False)
    assert result.action == "kept" and result.stored.model == BGE
    assert await dims(nxt, MEM) == {768}


# ---------------------------------------------------------------------------
# Backups
# ---------------------------------------------------------------------------


async def test_backups_are_atomic_private_unique_and_rotated(
    tmp_path: Path, runtimes: Callable[..., Any]
) -> None:
    rt = await _seeded(runtimes, tmp_path, memories=10, knowledge=3, reembed_backup_keep=2)
    made = [await E.create_backup(rt.maintenance) for _ in range(4)]
    assert len({b.path.name for b in made}) == 4  # unique even within one second
    listed = E.list_backups(rt.config.backup_dir)
    assert [b.path for b in listed] == [made[3].path, made[2].path]  # newest first, 2 kept
    assert sorted(p.name for p in rt.config.backup_dir.iterdir()) == sorted(
        b.path.name for b in listed
    )
    for b in listed:
        assert stat.S_IMODE(b.path.stat().st_mode) == 0o600
        assert b.counts == {MEM: 10, KNOW: 3} and b.fingerprint.model == NOMIC
    data = json.loads(made[3].path.read_text(encoding="utf-8"))
    items = data["collections"][MEM]["items"]
    assert {i["id"] for i in items} == set(await snapshot(rt, MEM))
    assert "embedding" not in json.dumps(items)  # no vectors
    assert data["collections"][KNOW]["items"][-1] == {
        "id": "KNOWLEDGE_nometa",
        "document": "没有 metadata 的知识",
        "metadata": None,
    }
    header, contents = E.load_backup(made[3].path)
    assert header["counts"] == {MEM: 10, KNOW: 3} and len(contents[KNOW].items) == 3


async def test_restore_round_trip_replaces_current_contents(
    tmp_path: Path, runtimes: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # One add (and progress step) per batch.
    monkeypatch.setattr(_real(REBUILD), "ADD_BATCH_LOCAL", 8)
    rt = await _seeded(runtimes, tmp_path, memories=25, knowledge=4, reembed_batch_size=8)
    mem_before, know_before = await snapshot(rt, MEM), await snapshot(rt, KNOW)
    backup = await E.create_backup(rt.maintenance)
    # Change things after the backup.
    await rt.store.delete(ALICE, "m0001")
    await rt.store.add(new_memory(ALICE, "user", "备份之后的新记忆"))
    await rt.store.update(ALICE, "m0002", content="改过的内容", tags=["新"])
    assert await snapshot(rt, MEM) != mem_before
    await rt.close()
    # Restore with another model: same ids/documents/metadatas, new vectors.
    rt2 = runtimes(tmp_path, embedding_model_name=BGE, reembed_batch_size=8)
    progress: list[tuple[int, int]] = []
    report = await E.restore_backup(
        rt2.maintenance, backup.path, progress=lambda d, t: progress.append((d, t))
    )
    # The archive (not in this backup) keeps the deleted m0001 and m0002's previous text,
    # re-embedded from their live copies.
    assert report.counts == {MEM: 25, KNOW: 4, rt2.store.archive.name: 2}
    assert await snapshot(rt2, MEM) == mem_before and await snapshot(rt2, KNOW) == know_before
    assert await dims(rt2, MEM) == {768}
    assert (await E.stored_fingerprint(rt2.store)).model == BGE
    assert progress[-1] == (31, 31) and len(progress) == 6  # 4 memory, 1 archive, 1 knowledge page
    # The pre-restore state was backed up and the restored file kept.
    assert report.backup is not None and report.backup != backup.path and backup.path.exists()
    _, pre = E.load_backup(report.backup)
    assert "改过的内容" in {i.document for i in pre[MEM].items}


async def test_restore_rejects_bad_files(tmp_path: Path, runtimes: Callable[..., Any]) -> None:
    rt = runtimes(tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(E.BackupError, match="不是合法的 JSON"):
        await E.restore_backup(rt.maintenance, bad)
    bad.write_text(json.dumps({"header": {"format": "other"}}), encoding="utf-8")
    with pytest.raises(E.BackupError, match="不是本插件的嵌入备份文件"):
        await E.restore_backup(rt.maintenance, bad)
    with pytest.raises(E.BackupError, match="不存在"):
        await E.restore_backup(rt.maintenance, tmp_path / "missing.json")


# ---------------------------------------------------------------------------
# Status
# ---------------------------------------------------------------------------


async def test_status_with_embedding_service_down(
    tmp_path: Path, runtimes: Callable[..., Any]
) -> None:
    old = await _seeded(runtimes, tmp_path, memories=4, knowledge=2)
    await seed(old, MEM, [("g1", "群记忆", memory_meta(GROUP, "group"))])
    await E.create_backup(old.maintenance)
    old.connection.close()
    rt = runtimes(tmp_path, embedding_model_name="auto", embedding_model_url="http://127.0.0.1:9")
    status = await E.collect_status(rt.maintenance)
    assert status.stored.model == NOMIC and status.current is None and status.match is None
    assert "无法连接" in status.current_error
    assert status.distribution == {(ALICE, "user"): 4, (GROUP, "group"): 1}
    assert status.knowledge_count == 2 and len(status.backups) == 1
    assert status.key_format_stored == status.key_format_current


# ---------------------------------------------------------------------------
# Remote ChromaDB
# ---------------------------------------------------------------------------


async def test_remote_chroma_fingerprint_check_and_remap(
    tmp_path: Path, runtimes: Callable[..., Any], chroma_server: ChromaServer
) -> None:
    suffix = uuid.uuid4().hex[:8]
    names = {"memory_name": f"mem-{suffix}", "knowledge_name": f"know-{suffix}"}
    old = runtimes(
        tmp_path, mode="remote", chroma=chroma_server, embedding_model_name=NOMIC, **names
    )
    await seed(old, names["memory_name"], sample_memories(12))
    await seed(old, names["knowledge_name"], sample_knowledge(3))
    assert (
        E.run_startup_check(old.maintenance, interactive=False).action == "refused"
    )  # no fingerprint yet
    await E.reset_fingerprint(old.maintenance)
    assert E.run_startup_check(old.maintenance, interactive=False).action == "match"
    mem_before = await snapshot(old, names["memory_name"])
    await old.close()
    rt = runtimes(
        tmp_path,
        mode="remote",
        chroma=chroma_server,
        embedding_model_name=BGE,
        embed_mismatch_policy="auto",
        reembed_batch_size=5,
        **names,
    )
    result = E.run_startup_check(rt.maintenance, interactive=False)
    assert result.action == "remapped", result.message
    assert await snapshot(rt, names["memory_name"]) == mem_before
    assert await dims(rt, names["memory_name"]) == {768} and await dims(
        rt, names["knowledge_name"]
    ) == {768}
    assert E.run_startup_check(rt.maintenance, interactive=False).action == "match"
    remaining = [n for n in await rt.connection.list_collections() if suffix in n]
    assert sorted(remaining) == sorted(names.values())
    for n in remaining:
        await rt.connection.delete_collection(n)
