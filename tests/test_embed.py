"""The embedding client against the local Ollama/OpenAI protocol server."""

from __future__ import annotations

import asyncio
import socket

import pytest

from tests.lazy import lazy_import
from tests.servers import EmbeddingServer, embed_text

E = lazy_import("amrita_plugin_memory.embedding.client", "amrita_plugin_memory.core.errors")


def client(server: EmbeddingServer, protocol: str = "ollama-embed", **kw):
    params = {"model": "nomic-embed-text:latest", "timeout": 2.0, "max_retries": 2, "backoff": 0.01}
    params |= kw
    return E.EmbeddingClient(protocol=protocol, base_url=server.url, **params)


def embed_requests(server: EmbeddingServer) -> list[dict]:
    return [r for r in server.requests if r["path"] in ("/api/embed", "/v1/embeddings")]


@pytest.mark.parametrize("protocol", ["ollama-embed", "openai"])
async def test_embeds_with_both_protocols(embed_server: EmbeddingServer, protocol: str) -> None:
    c = client(
        embed_server,
        protocol,
        model="nomic-embed-text:latest" if protocol != "openai" else "text-embedding-3-small",
    )
    try:
        vectors = await c.embed(["我喜欢吃苹果", "明天去北京出差"])
    finally:
        await c.close()
    assert len(vectors) == 2 and all(len(v) == 384 for v in vectors)
    assert vectors[0] == pytest.approx(embed_text("我喜欢吃苹果", 384))
    path = "/api/embed" if protocol == "ollama-embed" else "/v1/embeddings"
    assert [r["path"] for r in embed_requests(embed_server)] == [path]


async def test_openai_sends_api_key_and_accepts_v1_base() -> None:
    with EmbeddingServer(api_key="sk-secret") as server:
        good = E.EmbeddingClient(
            protocol="openai",
            base_url=server.url + "/v1",
            model="text-embedding-3-small",
            api_key="sk-secret",
        )
        bad = E.EmbeddingClient(
            protocol="openai",
            base_url=server.url,
            model="text-embedding-3-small",
            api_key="wrong",
            max_retries=0,
        )
        try:
            assert len((await good.embed(["你好"]))[0]) == 384
            with pytest.raises(E.EmbeddingHTTPError) as info:
                (await bad.embed(["你好"]))[0]
            assert info.value.status == 401
            assert "Incorrect API key" in str(info.value)
        finally:
            await good.close()
            await bad.close()
        auth = [r["headers"].get("Authorization") for r in embed_requests(server)]
        assert auth == ["Bearer sk-secret", "Bearer wrong"]


@pytest.mark.parametrize(
    ("protocol", "expected"),
    [("ollama-embed", "nomic-embed-text:latest"), ("openai", "nomic-embed-text:latest")],
)
async def test_auto_resolves_an_embedding_model(
    embed_server: EmbeddingServer, protocol: str, expected: str
) -> None:
    c = client(embed_server, protocol, model="auto")
    try:
        assert c.resolved_model is None
        assert await c.resolve_model() == expected
        vectors = await c.embed(["a"])
    finally:
        await c.close()
    assert len(vectors[0]) == embed_server.model_dims[expected]
    assert embed_requests(embed_server)[0]["body"]["model"] == expected


async def test_auto_without_embedding_models_is_clear(embed_server: EmbeddingServer) -> None:
    embed_server.set_models(["qwen2.5:7b", "llama3:8b"])
    c = client(embed_server, model="auto")
    try:
        with pytest.raises(E.EmbeddingResponseError, match="EMBEDDING_MODEL_NAME"):
            (await c.embed(["x"]))[0]
    finally:
        await c.close()


async def test_batches_inputs(embed_server: EmbeddingServer) -> None:
    c = client(embed_server, batch_size=3)
    try:
        texts = [f"记忆 {i}" for i in range(8)]
        vectors = await c.embed(texts)
    finally:
        await c.close()
    assert [len(r["body"]["input"]) for r in embed_requests(embed_server)] == [3, 3, 2]
    assert vectors[7] == pytest.approx(embed_text("记忆 7", 384))


async def test_5xx_is_retried_then_reported_with_status(embed_server: EmbeddingServer) -> None:
    embed_server.set_mode("error500")
    c = client(embed_server, max_retries=2)
    try:
        with pytest.raises(E.EmbeddingHTTPError) as info:
            (await c.embed(["x"]))[0]
    finally:
        await c.close()
    assert info.value.status == 500
    assert len(embed_requests(embed_server)) == 3  # first try + 2 retries


async def test_4xx_is_not_retried(embed_server: EmbeddingServer) -> None:
    c = client(embed_server, model="no-such-model")
    try:
        with pytest.raises(E.EmbeddingHTTPError) as info:
            (await c.embed(["x"]))[0]
    finally:
        await c.close()
    assert info.value.status == 404 and "not found" in str(info.value)
    assert len(embed_requests(embed_server)) == 1


async def test_recovers_when_service_comes_back(embed_server: EmbeddingServer) -> None:
    c = client(embed_server, max_retries=0)
    try:
        embed_server.set_mode("error503")
        with pytest.raises(E.EmbeddingHTTPError):
            (await c.embed(["x"]))[0]
        embed_server.set_mode("ok")
        assert len((await c.embed(["x"]))[0]) == 384
    finally:
        await c.close()


async def test_hang_times_out_as_unavailable(embed_server: EmbeddingServer) -> None:
    embed_server.set_mode("hang")
    c = client(embed_server, timeout=0.5, max_retries=1)
    try:
        # A deadline, not a measurement: a hang would fail here instead of at pytest's timeout.
        async with asyncio.timeout(30):
            with pytest.raises(E.EmbeddingUnavailable, match="超时"):
                (await c.embed(["x"]))[0]
    finally:
        await c.close()


async def test_connection_refused_is_unavailable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    c = E.EmbeddingClient(
        protocol="ollama-embed",
        base_url=f"http://127.0.0.1:{port}",
        model="m",
        max_retries=1,
        backoff=0.01,
    )
    try:
        with pytest.raises(E.EmbeddingUnavailable, match="无法连接"):
            (await c.embed(["x"]))[0]
    finally:
        await c.close()


async def test_dropped_connection_is_unavailable(embed_server: EmbeddingServer) -> None:
    embed_server.set_mode("close")
    c = client(embed_server, max_retries=1)
    try:
        with pytest.raises(E.EmbeddingUnavailable):
            (await c.embed(["x"]))[0]
    finally:
        await c.close()


async def test_wrong_vector_count_is_rejected(embed_server: EmbeddingServer) -> None:
    embed_server.set_mode("wrong_count")
    c = client(embed_server)
    try:
        with pytest.raises(E.EmbeddingResponseError, match="数量不符"):
            await c.embed(["a", "b"])
    finally:
        await c.close()


async def test_inconsistent_dimension_is_rejected(embed_server: EmbeddingServer) -> None:
    embed_server.set_mode("wrong_dim", after=1)
    c = client(embed_server, batch_size=1)
    try:
        with pytest.raises(E.EmbeddingResponseError, match="维度不一致"):
            await c.embed(["a", "b"])
    finally:
        await c.close()


async def test_rejects_a_bare_string(embed_server: EmbeddingServer) -> None:
    c = client(embed_server)
    try:
        with pytest.raises(TypeError):
            await c.embed("abc")
        assert await c.embed([]) == []
    finally:
        await c.close()
    assert embed_requests(embed_server) == []


async def test_one_session_is_reused(embed_server: EmbeddingServer) -> None:
    c = client(embed_server)
    try:
        (await c.embed(["a"]))[0]
        first = c._session
        (await c.embed(["b"]))[0]
        assert c._session is first
    finally:
        await c.close()
    assert c._session is None


@pytest.mark.parametrize(
    ("name", "families", "expected"),
    [
        ("nomic-embed-text", [], True),
        ("bge-m3:latest", [], True),
        ("multilingual-e5-small", [], True),
        ("all-minilm", [], True),
        ("qwen2.5:7b", ["qwen2"], False),
        ("gte-large", [], True),
        ("gtest-chat", [], False),  # "gte" only as a whole name part
        ("mxbai-large", ["bert"], True),  # Ollama's BERT family
    ],
)
def test_which_listed_models_look_like_embedding_models(
    name: str, families: list[str], expected: bool
) -> None:
    from amrita_plugin_memory.embedding.model_choice import looks_like_embedding_model

    assert looks_like_embedding_model(name, families) is expected


def test_list_answers_of_both_protocols_are_read_and_junk_is_skipped() -> None:
    from amrita_plugin_memory.embedding.model_choice import listed_models

    openai = {"data": [{"id": "a"}, {"no_id": 1}, "junk", {"id": "b"}]}
    assert listed_models("openai", openai) == [("a", []), ("b", [])]
    ollama = {
        "models": [
            {"name": "m1", "details": {"family": "bert", "families": ["bert", "x"]}},
            {"model": "m2", "details": "not a dict"},
            {"details": {}},
            7,
        ]
    }
    assert listed_models("ollama-embed", ollama) == [
        ("m1", ["bert", "bert", "x"]),
        ("m2", [""]),
    ]
    assert listed_models("openai", ["not", "a", "dict"]) == []
    assert listed_models("ollama-embed", None) == []
