"""Reliability: concurrency, injected faults, hostile commands, permissions, log hygiene.

Every test here checks the invariant that matters to a bot operator: whatever
fails, every memory is still there with the same content and metadata
(count and checksum before == after). The suite reports a one-line summary
(inputs tried, faults injected, items lost) at the end of the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.botproject import NOMIC, BotProject, make_runtime, sample_memories, seed
from tests.chat import BotRecorder, make_bot
from tests.conftest import SUPERUSER
from tests.events import group_event, private_event
from tests.helpers import new_memory, runtime, view_of
from tests.lazy import lazy_import
from tests.reliability_stats import STATS
from tests.servers import ChromaServer, EmbeddingServer

E = lazy_import(
    "amrita_plugin_memory.embedding",
    "amrita_plugin_memory.embedding.remap",
    "amrita_plugin_memory.core.errors",
)
K = lazy_import("amrita_plugin_memory.storage.keys", "amrita_plugin_memory.adapters.events")
M = lazy_import("amrita_plugin_memory.tools.commands")
R = lazy_import("amrita_plugin_memory.tools.results")
T = lazy_import(
    "amrita_plugin_memory.tools.memory_tools",
    "amrita_plugin_memory.storage.scope",
    "amrita_plugin_memory.tools.args",
    "amrita_plugin_memory.adapters.events",
)
V = lazy_import(
    "amrita_plugin_memory.storage.memory_store",
    "amrita_plugin_memory.storage.chroma.connection",
    "amrita_plugin_memory.core.errors",
    "amrita_plugin_memory.core.records",
)


async def fingerprint_of_store(store: Any) -> tuple[int, str]:
    """(count, checksum) over ids, documents and metadatas of a whole collection."""
    rows = []
    async for page in store.iter_all_records(with_documents=True):
        rows += [
            (r.id, r.content, json.dumps(r.to_metadata(), sort_keys=True, ensure_ascii=False))
            for r in page
        ]
    rows.sort()
    digest = hashlib.sha256(json.dumps(rows, ensure_ascii=False).encode()).hexdigest()
    return len(rows), digest


def record_loss(before: tuple[int, str], after: tuple[int, str]) -> None:
    if before != after:
        STATS.items_lost += max(1, before[0] - after[0])
    assert after == before


# ---------------------------------------------------------------------------
# Concurrency
# ---------------------------------------------------------------------------


async def test_hundred_concurrent_writes_respect_the_limit() -> None:
    rt = runtime()
    assert rt.tools.memory_limit == 50
    caller = T.ScopeRules().of_chat(K.target_from_ids(14001))

    async def write(i: int) -> dict[str, Any]:
        return await rt.tools.write_memory(
            caller,
            {"content": f"并发写入 {i}", "tags": ["并发"], "importance": "low", "scope": "user"},
        )

    async def read(i: int) -> dict[str, Any]:
        return await rt.tools.read_memory(caller, {"query": f"并发写入 {i}", "scope": "user"})

    results = await asyncio.gather(*(write(i) for i in range(100)), *(read(i) for i in range(30)))
    STATS.inputs_tried += 130
    writes, reads = results[:100], results[100:]
    assert sum(r["ok"] for r in writes) == 50
    refusals = [r["error"] for r in writes if not r["ok"]]
    assert len(refusals) == 50 and all("已达上限" in e and "50/50" in e for e in refusals)
    assert all(r["ok"] for r in reads)  # reads during writes never fail
    assert await rt.store.count(view_of("QQPlatform_Private_14001")) == 50


# ---------------------------------------------------------------------------
# Embedding service faults
# ---------------------------------------------------------------------------


@pytest.fixture
async def fault_runtime(tmp_path: Path, embed_server: EmbeddingServer) -> Any:
    rt = make_runtime(tmp_path, embedding_timeout_seconds=0.5)
    await rt.store.add(new_memory("QQPlatform_Private_14100", "user", "故障前的记忆一", tags=["a"]))
    await rt.store.add(
        new_memory("QQPlatform_Private_14100", "user", "故障前的记忆二", importance="high")
    )
    yield rt
    await rt.close()


FAULTS = ["error500", "error503", "hang", "close", "wrong_dim", "wrong_count", "refused"]


@pytest.mark.parametrize("fault", FAULTS)
async def test_embedding_faults_during_write_and_read(
    fault_runtime: Any, embed_server: EmbeddingServer, fault: str
) -> None:
    rt = fault_runtime
    caller = T.ScopeRules().of_chat(K.target_from_ids(14100))
    before = await fingerprint_of_store(rt.store)
    if fault == "refused":
        embed_server.stop()
    else:
        embed_server.set_mode(fault)
    STATS.faults_injected += 1
    target = (await rt.store.list(view_of("QQPlatform_Private_14100")))[0]
    try:
        # Issue #47: an outage refuses nothing. One deadline (0.5 s, no retry after a
        # timeout) for the whole sequence; the breaker spares the later calls a wait.
        async with asyncio.timeout(0.5 * 3 + 3.0):
            write = await rt.tools.write_memory(
                caller,
                {
                    "content": "故障期间记下：用户下周三去杭州",
                    "tags": [],
                    "importance": "low",
                    "scope": "user",
                },
            )
            read = await rt.tools.read_memory(caller, {"query": "杭州", "scope": "user"})
            update = await rt.tools.update_memory(
                caller, {"id": target.id, "scope": "user", "content": "改写：用户养了一只猫"}
            )
    finally:
        if fault == "refused":
            embed_server.start()
        embed_server.set_mode("ok")
    for result in (write, read, update):
        assert result["ok"] is True, result
        assert "Traceback" not in json.dumps(result, ensure_ascii=False)
    # Kept and said so: the note tells the model not to retry nor apologise.
    assert write["note"] == update["note"] == R.PENDING_NOTE
    view = view_of("QQPlatform_Private_14100")
    assert (await rt.store.get(view, write["memory"]["id"])).pending
    assert [m["content"] for m in read["memories"]][:1] == ["故障期间记下：用户下周三去杭州"]
    # Nothing lost: the memories from before are there, the changed one as changed.
    after = {r.id: r for r in await rt.store.list(view_of("QQPlatform_Private_14100"), limit=10)}
    assert len(after) == before[0] + 1
    assert after[target.id].content == "改写：用户养了一只猫"
    STATS.items_lost += max(0, before[0] + 1 - len(after))
    # Recovery without restarting anything; the kept memory is found by keywords meanwhile.
    rt.store.vectors.breaker.success()
    again = await rt.tools.write_memory(
        caller, {"content": "恢复后的记忆", "tags": [], "importance": "low", "scope": "user"}
    )
    assert again["ok"] is True and "note" not in again
    assert not (await rt.store.get(view, again["memory"]["id"])).pending
    found = await rt.tools.read_memory(caller, {"query": "杭州", "scope": "user"})
    assert "故障期间记下：用户下周三去杭州" in [m["content"] for m in found["memories"]]


@pytest.mark.parametrize("fault", ["error500", "hang", "refused", "wrong_dim"])
async def test_embedding_faults_during_startup_check_and_reindex(
    tmp_path: Path, embed_server: EmbeddingServer, fault: str
) -> None:
    rt = make_runtime(tmp_path, embedding_timeout_seconds=0.5, reembed_batch_size=4)
    try:
        await seed(rt, rt.store.name, sample_memories(20))
        await E.reset_fingerprint(rt.maintenance)
        before = await fingerprint_of_store(rt.store)
        if fault == "refused":
            embed_server.stop()
        else:
            embed_server.set_mode(fault, after=2)
        STATS.faults_injected += 2
        try:
            check = await asyncio.to_thread(E.run_startup_check, rt.maintenance, interactive=False)
            assert check.ok  # the bot loads; tools report errors while the fault lasts
            with pytest.raises(Exception) as info:
                await E.remap(rt.maintenance)
            assert "Traceback" not in str(info.value)
        finally:
            if fault == "refused":
                embed_server.start()
            embed_server.set_mode("ok")
        rt.store.invalidate()
        record_loss(before, await fingerprint_of_store(rt.store))
        assert (await E.stored_fingerprint(rt.store)).model == NOMIC
        report = await E.remap(rt.maintenance)  # the retry succeeds once the service is back
        assert report.total == 20
        record_loss(before, await fingerprint_of_store(rt.store))
    finally:
        await rt.close()


# ---------------------------------------------------------------------------
# Remote ChromaDB stopped and restarted
# ---------------------------------------------------------------------------


async def test_remote_chroma_down_and_back(
    tmp_path: Path, chroma_server: ChromaServer, embed_server: EmbeddingServer
) -> None:
    rt = make_runtime(
        tmp_path, mode="remote", chroma=chroma_server, memory_name="reliability-remote"
    )
    caller = T.ScopeRules().of_chat(K.target_from_ids(14200))
    try:
        for i in range(5):
            assert (
                await rt.tools.write_memory(
                    caller, {"content": f"远程记忆 {i}", "tags": [], "scope": "user"}
                )
            )["ok"]
        before = await fingerprint_of_store(rt.store)
        chroma_server.stop()
        STATS.faults_injected += 1
        try:
            results = [
                await rt.tools.write_memory(
                    caller, {"content": "宕机时写入", "tags": [], "scope": "user"}
                ),
                await rt.tools.read_memory(caller, {"query": "远程", "scope": "user"}),
                await rt.tools.list_memory(caller, {"limit": 5, "scope": "user"}),
                await rt.tools.delete_memory(caller, {"id": "0" * 32, "scope": "user"}),
            ]
        finally:
            chroma_server.start()
        for result in results:
            assert result["ok"] is False and result["error"].startswith("向量数据库不可用")
        record_loss(before, await fingerprint_of_store(rt.store))
        assert (
            await rt.tools.write_memory(
                caller, {"content": "恢复后写入", "tags": [], "scope": "user"}
            )
        )["ok"]
    finally:
        await rt.connection.delete_collection("reliability-remote")
        await rt.close()


# ---------------------------------------------------------------------------
# A delete under a fault: the memory stays, or is in the archive
# ---------------------------------------------------------------------------


async def kept_texts(rt: Any) -> dict[str, str]:
    """``{memory id: text}`` of the memories live or archived as themselves (not versions)."""
    rt.store.invalidate()
    kept: dict[str, str] = {}
    async for page in rt.store.iter_all_records(with_documents=True):
        kept |= {r.id: r.content for r in page}
    for row in await rt.store.archive.list_all(limit=10_000):
        if not row.is_version:
            kept.setdefault(row.memory_id, row.record.content)
    return kept


DELETE_FAULTS = [
    "archive_in_maintenance",
    "chroma_down_before",
    "chroma_down_mid",
    "embedding_down",
]


@pytest.mark.parametrize("fault", DELETE_FAULTS)
async def test_a_delete_under_a_fault_loses_nothing(
    tmp_path: Path, embed_server: EmbeddingServer, chroma_server: ChromaServer, fault: str
) -> None:
    """``delete_memory`` (chat tool) with the archive refusing writes, Chroma down before it
    or between its archive write and its live delete, the embedding service down: every
    memory is still live or in the archive, with its text; a refused delete says so."""
    remote = fault.startswith("chroma_down")
    rt = make_runtime(
        tmp_path,
        mode="remote" if remote else "local",
        chroma=chroma_server if remote else None,
        memory_name=f"reliability-delete-{fault.replace('_', '-')}",
    )
    uid = 14300
    caller = T.ScopeRules().of_chat(K.target_from_ids(uid))
    try:
        ids = [
            (await rt.tools.write_memory(caller, {"content": text, "tags": [], "scope": "user"}))["memory"]["id"]
            for text in ("用户喜欢吃苹果", "用户的猫叫团子", "用户在上海工作")
        ]  # fmt: skip
        assert len(set(ids)) == 3
        before = await kept_texts(rt)
        STATS.faults_injected += 1
        archive = await rt.connection.get_collection(rt.store.archive.name, create=True)
        save = rt.store.archive.save
        if fault == "archive_in_maintenance":
            await rt.connection.run(lambda: archive.modify(metadata={"reembed_running": "test"}))
        elif fault == "chroma_down_before":
            chroma_server.stop()
        elif fault == "chroma_down_mid":

            async def save_then_stop(*args: Any, **kwargs: Any) -> None:
                await save(*args, **kwargs)
                chroma_server.stop()

            rt.store.archive.save = save_then_stop
        else:
            embed_server.stop()
        try:
            result = await rt.tools.delete_memory(caller, {"id": ids[0], "scope": "user"})
        finally:
            if remote and not chroma_server.running:
                chroma_server.start()
            if fault == "embedding_down":
                embed_server.start()
            if fault == "chroma_down_mid":
                rt.store.archive.save = save
        STATS.inputs_tried += 1
        after = await kept_texts(rt)
        lost = [i for i, text in before.items() if after.get(i) != text]
        STATS.items_lost += len(lost)
        assert not lost, (result, lost)
        live = await rt.store.get(view_of(f"QQPlatform_Private_{uid}"), ids[0])
        if fault == "embedding_down":  # a delete needs no embedding
            assert result == {"ok": True, "deleted": ids[0]} and live is None
        else:
            assert result["ok"] is False and "Traceback" not in result["error"], result
            expected = "记忆库维护中" if fault == "archive_in_maintenance" else "向量数据库不可用"
            assert result["error"].startswith(expected), result["error"]
            assert live is not None  # refused: still live (and maybe archived too)
            if fault == "archive_in_maintenance":
                await rt.connection.run(lambda: archive.modify(metadata={"reembed_running": ""}))
                rt.store.archive.invalidate()
            # Once the fault is gone the same delete goes through.
            again = await rt.tools.delete_memory(caller, {"id": ids[0], "scope": "user"})
            assert again == {"ok": True, "deleted": ids[0]}, again
        assert (await kept_texts(rt)) == before
        assert await rt.store.archive.ids([ids[0]]) == {ids[0]}
    finally:
        if remote:
            for name in (rt.store.name, rt.store.archive.name):
                with contextlib.suppress(Exception):
                    await rt.connection.delete_collection(name)
        await rt.close()


# ---------------------------------------------------------------------------
# SIGKILL in the middle of a reindex
# ---------------------------------------------------------------------------


async def test_sigkill_during_reindex_loses_nothing(
    tmp_path: Path, embed_server: EmbeddingServer
) -> None:
    project = BotProject(tmp_path / "bot")
    project.write_env(REEMBED_BATCH_SIZE=8)
    rt = project.runtime()
    try:
        await seed(rt, rt.store.name, sample_memories(120))
        await E.reset_fingerprint(rt.maintenance)
        before = await fingerprint_of_store(rt.store)
        old = await E.stored_fingerprint(rt.store)
    finally:
        await rt.close()

    embed_server.reset()
    embed_server.set_mode("hang", after=6)  # the remap stalls after 6 batches
    proc = project.spawn_ambot("memory", "reindex", "--yes")
    try:
        deadline = time.monotonic() + 120
        # Polls another process's progress: no event to wait on.
        while embed_server.embed_calls < 6 and time.monotonic() < deadline and proc.poll() is None:  # noqa: ASYNC110
            await asyncio.sleep(0.2)
        assert embed_server.embed_calls >= 6, "the reindex never got going"
        os.killpg(proc.pid, signal.SIGKILL)
        STATS.faults_injected += 1
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
        embed_server.set_mode("ok")

    rt = project.runtime()
    try:
        await E.recover_interrupted_remap(rt.maintenance)
        rt.store.invalidate()
        record_loss(before, await fingerprint_of_store(rt.store))
        assert (await E.stored_fingerprint(rt.store)) == old
        assert not [n for n in await rt.connection.list_collections() if n.endswith("__reembed")]
        report = await E.remap(rt.maintenance)
        assert report.total == 120
        record_loss(before, await fingerprint_of_store(rt.store))
    finally:
        await rt.close()


# ---------------------------------------------------------------------------
# Hostile command input (property-based)
# ---------------------------------------------------------------------------

_words = st.sampled_from(
    [
        "user",
        "group",
        "list",
        "search",
        "delete",
        "个人",
        "群",
        "删除",
        "export",
        "forget",
        "confirm",
        "遗忘",
        "<b>",
        "</MEMO>",
        "0",
        "-1",
        "9" * 30,
        "\u202e",
        "😀",
    ]
)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    words=st.lists(_words | st.text(max_size=30), max_size=6),
    in_group=st.booleans(),
    admin=st.booleans(),
)
async def test_property_commands_never_raise_or_change_others(
    words: list[str], in_group: bool, admin: bool
) -> None:
    rt = runtime()
    victim = "QQPlatform_Private_14301"
    if await rt.store.count(view_of(victim)) == 0:
        await rt.store.add(new_memory(victim, "user", "不应被动到的记忆"))
    before = await fingerprint_of_store_partition(rt.store, victim)

    async def manage() -> bool:
        return admin

    caller = T.ScopeRules().of_chat(K.target_from_ids(14300, 24300 if in_group else None), manage)
    commands = M.MemoryCommands(rt.tools, None, _own_data_commands(rt))
    reply = await commands.run(M.parse_command(" ".join(words)), caller)
    STATS.inputs_tried += 1
    assert isinstance(reply, str) and reply and "Traceback" not in reply
    assert await fingerprint_of_store_partition(rt.store, victim) == before


_OWN_DATA: list[Any] = []


def _own_data_commands(rt: Any) -> Any:
    """One ``/memory user export|forget`` for every example: a forget's preview in one
    example arms its confirmation in a later one (the caller forgets only themselves)."""
    if not _OWN_DATA:
        from amrita_plugin_memory.adapters.group_hooks import current_hooks
        from amrita_plugin_memory.tools.user_commands import UserCommands

        hooks = current_hooks()
        assert hooks is not None
        data = rt.user_data(hooks.awareness.stores)
        _OWN_DATA.append(UserCommands(data, rt.config.export_dir))
    return _OWN_DATA[0]


async def fingerprint_of_store_partition(store: Any, partition: str) -> list[tuple[str, str]]:
    return sorted((r.id, r.content) for r in await store.list(view_of(partition), limit=1000))


# ---------------------------------------------------------------------------
# Permission matrix (real permission code: Amrita's is_group_admin + superusers)
# ---------------------------------------------------------------------------

ROLES = [("member", 14400), ("admin", 14401), ("owner", 14402), ("member", int(SUPERUSER))]
MUTATIONS = ["write_memory", "update_memory", "delete_memory", "update_memo"]


@pytest.mark.parametrize(("role", "uid"), ROLES)
@pytest.mark.parametrize("where", ["private", "group"])
@pytest.mark.parametrize("tool", MUTATIONS)
async def test_permission_matrix(role: str, uid: int, where: str, tool: str) -> None:
    rt = runtime()
    gid = 24400
    recorder = BotRecorder(roles={(gid, uid): role})
    bot = make_bot(recorder)
    event = group_event(uid, gid, "x", role=role) if where == "group" else private_event(uid, "x")
    caller = await T.scope_from_event(bot, event, rt.scopes)
    STATS.inputs_tried += 2
    manager = where == "group" and (role in ("admin", "owner") or str(uid) == SUPERUSER)

    # Personal scope: always the caller's own partition, always allowed (on a memory this
    # chat may read: said here; a private one is not found from a group, see below).
    origin = f"group:{gid}" if where == "group" else "private"
    own = await rt.store.add(
        new_memory(f"QQPlatform_Private_{uid}", "user", "自己的记忆", origin=origin)
    )
    if where == "group" and tool == "update_memory":
        hidden = await rt.store.add(new_memory(f"QQPlatform_Private_{uid}", "user", "私聊里说的"))
        refused = await rt.tools.update_memory(caller, {"id": hidden.id, "importance": "high"})
        assert refused["ok"] is False and "私聊里说的" not in str(refused)
    args = {
        "write_memory": {"content": "新记忆", "tags": [], "scope": "user"},
        "update_memory": {"id": own.id, "scope": "user", "importance": "high"},
        "delete_memory": {"id": own.id, "scope": "user"},
        "update_memo": {"content": "备忘"},
    }[tool]
    assert (await getattr(rt.tools, tool)(caller, args))["ok"] is True

    # Group scope: writing is open to members, changing needs a manager.
    shared = await rt.store.add(new_memory(f"QQPlatform_Group_{gid}", "group", "群记忆"))
    group_args = {
        "write_memory": {"content": "群新记忆", "tags": [], "scope": "group"},
        "update_memory": {"id": shared.id, "scope": "group", "importance": "high"},
        "delete_memory": {"id": shared.id, "scope": "group"},
        "update_memo": None,
    }[tool]
    if group_args is None:
        return
    result = await getattr(rt.tools, tool)(caller, group_args)
    if where == "private":
        assert result["ok"] is False and "只能在群聊中使用" in result["error"]
    elif tool == "write_memory":
        assert result["ok"] is True
    else:
        assert result["ok"] is manager
        if not manager:
            assert "管理员" in result["error"]
            assert (
                await rt.store.get(view_of(f"QQPlatform_Group_{gid}"), shared.id)
            ).importance == "medium"


# ---------------------------------------------------------------------------
# Log hygiene: memory and memo text never at INFO or above
# ---------------------------------------------------------------------------


@pytest.fixture
def plugin_logs() -> Iterator[list[str]]:
    from nonebot import logger

    lines: list[str] = []

    def sink(message: Any) -> None:
        record = message.record
        if record["name"].startswith("amrita_plugin_memory") and record["level"].no >= 20:
            lines.append(record["message"])

    handler = logger.add(sink, level="DEBUG")
    yield lines
    logger.remove(handler)


async def test_memory_text_is_never_logged(
    plugin_logs: list[str], embed_server: EmbeddingServer
) -> None:
    rt = runtime()
    secret = "机密内容-身份证号-110101199001011234"
    caller = T.ScopeRules().of_chat(K.target_from_ids(14500))
    written = await rt.tools.write_memory(
        caller, {"content": secret, "tags": ["机密标签"], "scope": "user"}
    )
    await rt.tools.update_memory(
        caller, {"id": written["memory"]["id"], "scope": "user", "content": secret + "2"}
    )
    await rt.tools.read_memory(caller, {"query": secret, "scope": "user"})
    await rt.tools.update_memo(caller, {"content": "备忘" + secret})
    embed_server.set_mode("error500")
    try:
        await rt.tools.write_memory(caller, {"content": secret, "tags": [], "scope": "user"})
    finally:
        embed_server.set_mode("ok")
    await rt.tools.delete_memory(caller, {"id": written["memory"]["id"], "scope": "user"})
    assert plugin_logs, "expected some INFO logs from the plugin"
    joined = "\n".join(plugin_logs)
    assert "身份证号" not in joined and "机密标签" not in joined
