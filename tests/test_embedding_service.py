"""The embedding service as a deployment meets it: late, hung, oddly named, oddly addressed.

* First boot with the service still down (Docker start order): the fingerprint
  is recorded at the first successful embedding, so a plain restart loads.
* ``EMBEDDING_MODEL_NAME=auto`` is pinned to the model of the stored fingerprint.
* A hung service costs the start-up check a few seconds and a tool call one
  deadline (``EMBEDDING_TIMEOUT_SECONDS``), after which the write is kept pending
  (issue #47); only refused connections and 5xx are retried, never a timeout.
* ``auto`` finds the model of a server that lists one non-"embed" model, and a
  server without a recognisable embedding model is reported as a
  configuration problem.
* ``http://host:port``, ``…/`` and ``…/v1/`` are one fingerprint; fingerprints
  written from the old un-normalised form are migrated without re-embedding.

Everything runs against real servers: the local embedding server (own
instance per test, so hung handlers never leak into other tests), embedded
ChromaDB and, for remote mode, the ``chroma run`` fixture.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.botproject import BGE, NOMIC, make_runtime, memory_meta, sample_memories, seed
from tests.conftest import captured_logs
from tests.lazy import lazy_import
from tests.reliability_stats import STATS
from tests.servers import ChromaServer, EmbeddingServer

R = lazy_import("amrita_plugin_memory.embedding.report_json")
E = lazy_import(
    "amrita_plugin_memory.embedding",
    "amrita_plugin_memory.embedding.client",
    "amrita_plugin_memory.embedding.fingerprint",
    "amrita_plugin_memory.core.errors",
)
K = lazy_import("amrita_plugin_memory.storage.keys", "amrita_plugin_memory.adapters.events")
T = lazy_import("amrita_plugin_memory.tools.memory_tools", "amrita_plugin_memory.storage.scope")
RES = lazy_import("amrita_plugin_memory.tools.results")

E5 = "multilingual-e5-small-q4"
USER = 15001


def _never_called(question: str) -> bool:
    raise AssertionError(f"confirm must not be called: {question}")


def _caller(uid: int = USER) -> Any:
    return T.ScopeRules().of_chat(K.target_from_ids(uid))


async def _write(rt: Any, content: str, uid: int = USER) -> dict[str, Any]:
    return await rt.tools.write_memory(
        _caller(uid), {"content": content, "tags": ["测试"], "importance": "low", "scope": "user"}
    )


@pytest.fixture
def server() -> Iterator[EmbeddingServer]:
    """A private embedding server (stopping it releases its hung requests)."""
    srv = EmbeddingServer()
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
async def runtimes() -> AsyncIterator[Callable[..., Any]]:
    """Runtimes with the production retry policy (``make_runtime`` fails fast), closed at the end."""
    made: list[Any] = []

    def factory(data: Path, server: EmbeddingServer, **env: Any) -> Any:
        env.setdefault("embedding_model_url", server.url)
        env.setdefault("embedding_model_name", "auto")
        env.setdefault("embed_mismatch_policy", "ask")
        rt = make_runtime(data, **env)
        rt.embedder.max_retries = 2
        rt.embedder.backoff = 0.05
        made.append(rt)
        return rt

    yield factory
    for rt in made:
        await rt.close()


def _remote_names(request: pytest.FixtureRequest, mode: str) -> dict[str, Any]:
    if mode == "local":
        return {}
    suffix = uuid.uuid4().hex[:8]
    chroma: ChromaServer = request.getfixturevalue("chroma_server")
    return {
        "mode": "remote",
        "chroma": chroma,
        "memory_name": f"mem-{suffix}",
        "knowledge_name": f"know-{suffix}",
    }


async def _drop_remote(rt: Any, names: dict[str, Any]) -> None:
    for key in ("memory_name", "knowledge_name"):
        if key in names and names[key] in await rt.connection.list_collections():
            await rt.connection.delete_collection(names[key])


def _stopped(server: EmbeddingServer) -> EmbeddingServer:
    """The server with its port kept but not listening (the service is not up yet)."""
    server.stop()
    return server


# ---------------------------------------------------------------------------
# 6. First boot with the service down; auto pinned to the recorded model
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["local", "remote"])
async def test_first_boot_with_service_down_records_fingerprint_at_first_embedding(
    tmp_path: Path,
    server: EmbeddingServer,
    runtimes: Callable[..., Any],
    request: pytest.FixtureRequest,
    mode: str,
) -> None:
    names = _remote_names(request, mode)
    _stopped(server)
    first = runtimes(tmp_path, server, **names)
    STATS.faults_injected += 1
    check = E.run_startup_check(first.maintenance, interactive=False, confirm=_never_called)
    assert (check.ok, check.action) == (True, "unavailable")
    server.start()  # the service comes up after the bot
    results = await asyncio.gather(*(_write(first, f"服务启动后的记忆 {i}") for i in range(5)))
    assert all(r["ok"] for r in results), results
    stored = await E.stored_fingerprint(first.store)
    assert stored is not None and stored.model == NOMIC
    await first.close()
    # A plain restart under the default `ask`, without a TTY, loads cleanly.
    second = runtimes(tmp_path, server, **names)
    again = E.run_startup_check(second.maintenance, interactive=False, confirm=_never_called)
    assert (again.ok, again.action) == (True, "match"), again.message
    hits = await second.tools.read_memory(_caller(), {"query": "服务启动后的记忆 3"})
    assert hits["ok"] and hits["memories"][0]["content"] == "服务启动后的记忆 3"
    await _drop_remote(second, names)


@pytest.mark.parametrize("writer", ["old_plugin_data", "other_process_after_start"])
async def test_first_embedding_never_fingerprints_vectors_it_did_not_write(
    tmp_path: Path, server: EmbeddingServer, runtimes: Callable[..., Any], writer: str
) -> None:
    """A store that holds vectors of unknown origin keeps "no fingerprint" (a real mismatch)."""
    if writer == "old_plugin_data":
        old = runtimes(tmp_path, server, embedding_model_name=NOMIC)
        await seed(old, old.store.name, sample_memories(3))  # an older plugin, no fingerprint
        await old.close()
    _stopped(server)
    auto = runtimes(tmp_path, server)
    STATS.faults_injected += 1
    check = E.run_startup_check(auto.maintenance, interactive=False, confirm=_never_called)
    assert check.action == "unavailable"
    if writer == "other_process_after_start":
        # Another writer (e.g. a second bot on a remote Chroma) got there first.
        col = await auto.connection.get_collection(auto.store.name)
        await auto.connection.run(
            lambda: col.add(
                ids=["foreign"],
                documents=["别的进程写入的"],
                embeddings=[[0.05] * 384],
                metadatas=[memory_meta("QQPlatform_Private_1")],
            )
        )
    server.start()
    assert (await _write(auto, "我的第一条记忆"))["ok"]
    assert await E.stored_fingerprint(auto.store) is None
    await auto.close()
    nxt = runtimes(tmp_path, server)
    result = E.run_startup_check(nxt.maintenance, interactive=False, confirm=_never_called)
    assert (result.ok, result.action) == (False, "refused")
    assert "未记录" in result.message


async def test_auto_is_pinned_to_the_model_of_the_stored_fingerprint(
    tmp_path: Path, server: EmbeddingServer, runtimes: Callable[..., Any]
) -> None:
    first = runtimes(tmp_path, server)
    assert E.run_startup_check(first.maintenance, interactive=False).action == "fresh"
    assert (await _write(first, "钉住模型之前的记忆"))["ok"]
    await first.close()
    # Later another embedding model is pulled into the service and listed first.
    server.set_models([BGE, "qwen2.5:7b", NOMIC])
    second = runtimes(tmp_path, server)
    result = E.run_startup_check(second.maintenance, interactive=False, confirm=_never_called)
    assert (result.ok, result.action) == (True, "match"), result.message
    assert (await _write(second, "钉住模型之后的记忆"))["ok"]
    assert second.embedder.resolved_model == NOMIC
    assert {r["body"]["model"] for r in server.embed_requests()} == {NOMIC}
    hits = await second.tools.read_memory(_caller(), {"query": "钉住模型之前的记忆"})
    assert hits["memories"][0]["content"] == "钉住模型之前的记忆"
    await second.close()
    # The pinned model needs no model list: a restart with the service down still matches.
    _stopped(server)
    third = runtimes(tmp_path, server)
    down = E.run_startup_check(third.maintenance, interactive=False, confirm=_never_called)
    assert (down.ok, down.action) == (True, "match"), down.message


# ---------------------------------------------------------------------------
# 7. A hung service
# ---------------------------------------------------------------------------


async def test_startup_check_with_a_hung_service_gives_up_after_a_short_probe(
    tmp_path: Path, server: EmbeddingServer, runtimes: Callable[..., Any]
) -> None:
    rt = runtimes(tmp_path, server, embedding_timeout_seconds=30)
    server.set_mode("hang_all")
    STATS.faults_injected += 1
    # A guard, not a measurement: the probe's deadline is min(5, 30) seconds.
    async with asyncio.timeout(9):
        result = await asyncio.to_thread(
            E.run_startup_check, rt.maintenance, interactive=False, confirm=_never_called
        )
    assert (result.ok, result.action) == (True, "unavailable")
    assert "超时" in result.message
    assert [r["path"] for r in server.requests] == ["/api/tags"]  # no retry after a timeout


@pytest.mark.parametrize(("model", "fault"), [(NOMIC, "hang"), ("auto", "hang_all")])
async def test_tool_call_with_a_hung_service_keeps_the_write_within_one_deadline(
    tmp_path: Path, server: EmbeddingServer, runtimes: Callable[..., Any], model: str, fault: str
) -> None:
    rt = runtimes(tmp_path, server, embedding_model_name=model, embedding_timeout_seconds=1.5)
    server.set_mode(fault)
    STATS.faults_injected += 1
    # A guard, not a measurement: one deadline of 1.5 s for the whole call, retries included.
    async with asyncio.timeout(1.5 + 1.0):
        result = await _write(rt, "挂起期间的记忆：用户周六去爬香山")
    # Issue #47: kept pending, and the answer says so (no refusal, nothing lost).
    assert result["ok"] is True and result["note"] == RES.PENDING_NOTE, result
    assert len(server.requests) == 1  # the one request that hung; never retried
    assert await rt.store.count_all() == 1 and await rt.store.count_pending() == 1
    # Found by keywords at once, without waiting for the hung service (breaker open).
    async with asyncio.timeout(1.5):
        found = await rt.tools.read_memory(_caller(), {"query": "香山", "scope": "user"})
    assert [m["content"] for m in found["memories"]] == ["挂起期间的记忆：用户周六去爬香山"]
    assert len(server.requests) == 1


async def test_refused_connections_and_5xx_are_retried_but_not_timeouts(
    tmp_path: Path, server: EmbeddingServer, runtimes: Callable[..., Any]
) -> None:
    rt = runtimes(tmp_path, server, embedding_model_name=NOMIC, embedding_timeout_seconds=3)

    def cooled_down() -> None:
        """The store's breaker closed (its cooldown passed): the next write calls again."""
        server.reset()
        rt.store.vectors.breaker.success()

    # A transient 500 and 503: retried, the write succeeds.
    server.fail_next("error500")
    assert "note" not in (ok1 := await _write(rt, "重试后成功的记忆一")) and ok1["ok"]
    assert len(server.embed_requests()) == 2
    server.reset()
    server.fail_next("error503", 2)
    assert "note" not in (ok2 := await _write(rt, "重试后成功的记忆二")) and ok2["ok"]
    assert len(server.embed_requests()) == 3
    # A persistent 500: tried 1 + max_retries times, then kept pending (issue #47).
    cooled_down()
    server.set_mode("error500")
    with captured_logs("WARNING", with_level=False) as lines:
        failed = await _write(rt, "一直 500")
    assert failed["ok"] is True and failed["note"] == RES.PENDING_NOTE
    assert any("HTTP 500" in line for line in lines), lines
    assert len(server.embed_requests()) == 3
    # A 500 followed by a hang: the retry hangs, and the timeout is not retried.
    cooled_down()
    server.set_mode("hang")
    server.fail_next("error500")
    async with asyncio.timeout(3 + 1.0):
        hung = await _write(rt, "500 之后挂起")
    assert hung["ok"] is True and hung["note"] == RES.PENDING_NOTE
    assert len(server.embed_requests()) == 2
    # A refused connection: retried too (the client says how often).
    cooled_down()
    server.stop()
    with captured_logs("WARNING", with_level=False) as lines:
        refused = await _write(rt, "连接被拒绝")
    assert refused["ok"] is True and refused["note"] == RES.PENDING_NOTE
    assert any("无法连接" in line and "已重试 2 次" in line for line in lines), lines
    STATS.faults_injected += 5
    assert await rt.store.count_all() == 5 and await rt.store.count_pending() == 3


# ---------------------------------------------------------------------------
# 7b. `auto` with odd model lists, URL forms
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["openai", "ollama-embed"])
async def test_auto_uses_the_only_listed_model(
    tmp_path: Path, server: EmbeddingServer, runtimes: Callable[..., Any], protocol: str
) -> None:
    server.set_models([E5])
    url = server.url + "/v1" if protocol == "openai" else server.url
    rt = runtimes(tmp_path, server, embedding_proctol=protocol, embedding_model_url=url)
    result = E.run_startup_check(rt.maintenance, interactive=False, confirm=_never_called)
    assert (result.action, result.current.model) == ("fresh", E5)
    assert (await _write(rt, "单模型服务上的记忆"))["ok"]
    assert {r["body"]["model"] for r in server.embed_requests()} == {E5}


@pytest.mark.parametrize(
    ("listed", "expected"),
    [
        (["qwen2.5:7b", E5, "gpt-4o-mini"], E5),
        (["llama3:8b", "bge-m3:latest"], "bge-m3:latest"),
        (["gpt-4o-mini", "all-minilm:l6-v2", "qwen2.5:7b"], "all-minilm:l6-v2"),
        (["gte-qwen2-1.5b-instruct", "deepseek-r1:7b"], "gte-qwen2-1.5b-instruct"),
        (["qwen2.5:7b", "mxbai-embed-large:latest", E5], "mxbai-embed-large:latest"),
    ],
)
async def test_auto_prefers_embedding_models_and_logs_the_choice(
    server: EmbeddingServer, listed: list[str], expected: str
) -> None:
    server.set_models(listed)
    client = E.EmbeddingClient(protocol="openai", base_url=server.url, model="auto")
    try:
        with captured_logs("INFO", with_level=False) as lines:
            assert await client.resolve_model() == expected
    finally:
        await client.close()
    assert any(expected in line and "auto" in line for line in lines), lines


async def test_auto_without_a_recognisable_model_is_a_configuration_problem(
    tmp_path: Path, server: EmbeddingServer, runtimes: Callable[..., Any]
) -> None:
    server.set_models(["qwen2.5:7b", "llama3:8b"])
    rt = runtimes(tmp_path, server, embedding_proctol="openai")
    with captured_logs("WARNING", with_level=False) as lines:
        result = E.run_startup_check(rt.maintenance, interactive=False, confirm=_never_called)
    assert result.ok and result.action == "misconfigured"
    warnings = [line for line in lines if "[Memory]" in line]
    assert warnings
    for text in (result.message, *warnings):
        assert "EMBEDDING_MODEL_NAME" in text and "配置" in text
        assert "下次启动重新检查" not in text and "嵌入服务不可用" not in text
    status = await E.collect_status(rt.maintenance)
    assert status.current is None and status.config_problem
    assert "EMBEDDING_MODEL_NAME" in status.state[0]
    assert "嵌入服务恢复后" not in status.state[0]
    # The JSON form (console, `ambot memory status` through a running bot) says the same.
    shown = R.status_json(status, tmp_path)["fingerprint"]
    assert shown["config_problem"] is True and shown["state"] == status.state[0]
    # Issue #47: the memory is kept (pending, found by keywords) until the model is fixed.
    write = await _write(rt, "配置错误时的记忆")
    assert write["ok"] is True and write["note"] == RES.PENDING_NOTE, write
    assert await rt.store.count_pending() == 1
    found = await rt.tools.read_memory(_caller(), {"query": "配置错误", "scope": "user"})
    assert [m["content"] for m in found["memories"]] == ["配置错误时的记忆"]
    STATS.inputs_tried += 1


@pytest.mark.parametrize("protocol", ["ollama-embed", "openai"])
async def test_url_forms_of_one_server_give_one_fingerprint(protocol: str) -> None:
    async def fingerprint(url: str) -> Any:
        client = E.EmbeddingClient(protocol=protocol, base_url=url, model=NOMIC)
        return await E.current_fingerprint(client)

    base = await fingerprint("http://embed.example:8080")
    for form in (
        "http://embed.example:8080/",
        "http://embed.example:8080/v1",
        "http://embed.example:8080/v1/",
        "HTTP://Embed.Example:8080/v1/",
    ):
        assert (await fingerprint(form)) == base, form
    assert base.base_url == "http://embed.example:8080"
    assert (await fingerprint("http://embed.example")) == await fingerprint(
        "http://embed.example:80/"
    )
    assert (await fingerprint("https://embed.example:443/v1")).base_url == "https://embed.example"
    # Different servers stay different.
    assert (await fingerprint("http://embed.example:8081")) != base
    assert (await fingerprint("http://embed.example:8080/proxy")) != base


async def test_fingerprint_of_an_old_url_form_is_migrated_without_reembedding(
    tmp_path: Path, server: EmbeddingServer, runtimes: Callable[..., Any]
) -> None:
    old = runtimes(tmp_path, server, embedding_model_name=NOMIC)
    await seed(old, old.store.name, sample_memories(6))
    legacy = E.FingerprintInfo.of("ollama-embed", NOMIC, server.url + "/v1/")
    await old.store.set_meta(legacy.as_meta())  # what the old plugin wrote for that URL form
    await old.close()
    before = len(server.requests)
    rt = runtimes(tmp_path, server, embedding_model_name=NOMIC)
    status = await E.collect_status(rt.maintenance)  # read-only: already "一致"
    assert status.match is True and status.state[0] == "一致"
    with captured_logs("INFO", with_level=True) as lines:
        result = E.run_startup_check(rt.maintenance, interactive=False, confirm=_never_called)
    assert (result.ok, result.action) == (True, "match"), result.message
    stored = await E.stored_fingerprint(rt.store)
    assert stored is not None and stored.base_url == server.url
    assert stored.fingerprint == E.compute_fingerprint("ollama-embed", NOMIC, server.url)
    assert any(line.startswith("INFO") and "迁移" in line for line in lines), lines
    assert len(server.requests) == before  # nothing re-embedded
    assert not rt.config.backup_dir.exists()
    # The bot configured with the trailing-/v1 form is the same server too.
    await rt.close()
    v1 = runtimes(
        tmp_path, server, embedding_model_name=NOMIC, embedding_model_url=server.url + "/v1/"
    )
    assert E.run_startup_check(v1.maintenance, interactive=False).action == "match"


# ---------------------------------------------------------------------------
# 14. The HTTP session across event loops, through public API
# ---------------------------------------------------------------------------


async def test_session_set_aside_keeps_the_bot_loops_session(server: EmbeddingServer) -> None:
    client = E.EmbeddingClient(protocol="ollama-embed", base_url=server.url, model=NOMIC)
    try:
        await client.embed(["在 Bot 的事件循环上"])
        assert client.has_open_session

        def other_loop() -> int:
            async def work() -> int:
                try:
                    return len((await client.embed(["在另一个事件循环上"]))[0])
                finally:
                    await client.close()

            with client.session_set_aside():
                assert not client.has_open_session
                return asyncio.run(work())

        assert await asyncio.to_thread(other_loop) == 384
        assert client.has_open_session  # the bot loop's session came back, still usable
        assert len((await client.embed(["回到 Bot 的事件循环"]))[0]) == 384
    finally:
        await client.close()
    assert not client.has_open_session
