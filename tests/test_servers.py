"""Sanity tests for the local test-bed servers in ``tests.servers``.

The rest of the suite trusts these fakes to behave like Ollama / OpenAI / Chroma, so
they are checked here with real clients: aiohttp, the official ``openai`` SDK, urllib
from a subprocess, and ``chromadb.HttpClient``.
"""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest

from tests.servers import ChatServer, ChromaServer, EmbeddingServer, Reply, embed_text

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "save_memory",
            "description": "Save a memory",
            "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
        },
    }
]
REPORT_TOOL: list[Any] = [
    {
        "type": "function",
        "function": {"name": "report", "parameters": {"type": "object", "properties": {}}},
    }
]


def _dist(a: list[float], b: list[float]) -> float:
    return math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b, strict=True)))


@pytest.fixture
def embed_server() -> Iterator[EmbeddingServer]:
    with EmbeddingServer() as server:
        yield server


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    with ChatServer() as server:
        yield server


@pytest.fixture
async def client(chat_server: ChatServer) -> AsyncIterator[openai.AsyncOpenAI]:
    """An SDK client for the chat server (closed afterwards: no leaked sockets)."""
    async with openai.AsyncOpenAI(
        base_url=chat_server.base_url, api_key="sk-test", max_retries=0
    ) as sdk:
        yield sdk


async def _post(url: str, body: Any, **kwargs: Any) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.post(url, json=body, **kwargs) as r:
        return r.status, await r.json()


async def _get(url: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.get(url) as r:
        return r.status, await r.json()


# ---------------------------------------------------------------------- embed_text
def test_embed_text_is_deterministic_and_normalised() -> None:
    a = embed_text("Hello World", 64)
    assert a == embed_text("hello   world", 64)
    assert len(a) == 64
    assert math.isclose(sum(x * x for x in a), 1.0)
    empty = embed_text("   ", 16)
    assert empty == embed_text("", 16)
    assert math.isclose(sum(x * x for x in empty), 1.0)


def test_embed_text_similar_texts_are_close() -> None:
    base = embed_text("我喜欢吃苹果", 384)
    assert _dist(base, embed_text("我很喜欢吃苹果", 384)) < _dist(
        base, embed_text("明天去北京出差", 384)
    )
    eng = embed_text("I like eating apples", 384)
    assert _dist(eng, embed_text("I really like eating apples", 384)) < _dist(
        eng, embed_text("business trip to Beijing tomorrow", 384)
    )


# ---------------------------------------------------------------------- embedding server
async def test_ollama_embed_and_tags(embed_server: EmbeddingServer) -> None:
    url = embed_server.url
    status, body = await _post(f"{url}/api/embed", {"model": "bge-m3", "input": ["a", "b"]})
    assert status == 200
    assert body["model"] == "bge-m3"
    assert [len(v) for v in body["embeddings"]] == [768, 768]
    assert body["embeddings"][0] == embed_text("a", 768)
    assert body["load_duration"] == 0 and body["prompt_eval_count"] == 2

    status, body = await _post(
        f"{url}/api/embed", {"model": "nomic-embed-text:latest", "input": "x"}
    )
    assert status == 200 and len(body["embeddings"]) == 1 and len(body["embeddings"][0]) == 384

    status, body = await _post(f"{url}/api/embed", {"model": "missing", "input": "x"})
    assert (status, body) == (404, {"error": 'model "missing" not found, try pulling it first'})
    status, body = await _post(f"{url}/api/embed", {"model": "bge-m3", "input": 3})
    assert status == 400 and "error" in body

    status, tags = await _get(f"{url}/api/tags")
    models = tags["models"]
    assert status == 200
    assert models[0]["name"] == "qwen2.5:7b" and models[0]["details"]["family"] == "qwen2"
    families = {m["name"]: m["details"]["families"] for m in models}
    assert families["nomic-embed-text:latest"] == ["nomic-bert"]
    assert families["bge-m3:latest"] == ["bert"]
    assert {"modified_at", "size", "digest"} <= set(models[1])

    embed_server.set_models(["llama3:8b", "mxbai-embed-large:latest"])
    _, tags = await _get(f"{url}/api/tags")
    assert [m["details"]["family"] for m in tags["models"]] == ["llama", "bert"]
    status, body = await _post(f"{url}/api/embed", {"model": "mxbai-embed-large", "input": "x"})
    assert status == 200 and len(body["embeddings"][0]) == embed_server.default_dim

    assert embed_server.embed_calls == 3
    assert [r["path"] for r in embed_server.requests][:2] == ["/api/embed", "/api/embed"]
    assert embed_server.requests[0]["body"]["input"] == ["a", "b"]


@pytest.fixture
async def keyed_server() -> AsyncIterator[tuple[EmbeddingServer, openai.AsyncOpenAI]]:
    """An embedding server requiring an API key, plus an SDK client holding that key."""
    with EmbeddingServer(api_key="sk-emb") as server:
        base_url = f"{server.url}/v1"
        async with openai.AsyncOpenAI(base_url=base_url, api_key="sk-emb", max_retries=0) as sdk:
            yield server, sdk


async def test_openai_embeddings_with_sdk(
    keyed_server: tuple[EmbeddingServer, openai.AsyncOpenAI],
) -> None:
    server, client = keyed_server
    # The SDK requests base64 by default; the server must encode it the OpenAI way.
    result = await client.embeddings.create(model="text-embedding-3-small", input=["猫", "狗"])
    assert [d.index for d in result.data] == [0, 1]
    assert result.data[0].embedding == pytest.approx(embed_text("猫", 384), abs=1e-6)
    assert result.usage.total_tokens == 2
    result = await client.embeddings.create(
        model="text-embedding-3-small", input="猫", encoding_format="float"
    )
    assert result.data[0].embedding == embed_text("猫", 384)
    models = await client.models.list()
    assert [m.id for m in models.data][:2] == ["qwen2.5:7b", "gpt-4o-mini"]
    assert server.requests[0]["headers"]["Authorization"] == "Bearer sk-emb"

    with pytest.raises(openai.NotFoundError):
        await client.embeddings.create(model="nope", input="x")
    async with openai.AsyncOpenAI(
        base_url=f"{server.url}/v1", api_key="wrong", max_retries=0
    ) as bad:
        with pytest.raises(openai.AuthenticationError) as info:
            await bad.embeddings.create(model="text-embedding-3-small", input="x")
    assert info.value.code == "invalid_api_key"
    assert server.embed_calls == 2


async def test_embedding_failure_modes(embed_server: EmbeddingServer) -> None:
    embed = f"{embed_server.url}/api/embed"
    body = {"model": "nomic-embed-text", "input": ["a", "b"]}

    embed_server.set_mode("error500", after=1)
    assert (await _post(embed, body))[0] == 200
    assert (await _post(embed, body))[0] == 500
    assert (await _post(embed, body))[0] == 500
    assert (await _get(f"{embed_server.url}/api/tags"))[0] == 500
    assert (await _post(f"{embed_server.url}/v1/embeddings", body))[1]["error"]["type"] == (
        "server_error"
    )
    embed_server.set_mode("error503")
    assert (await _post(embed, body))[0] == 503
    assert (await _get(f"{embed_server.url}/api/tags"))[0] == 200

    embed_server.set_mode("wrong_dim")
    assert [len(v) for v in (await _post(embed, body))[1]["embeddings"]] == [383, 383]
    embed_server.set_mode("wrong_count")
    assert len((await _post(embed, body))[1]["embeddings"]) == 1

    embed_server.set_mode("close")
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await _post(embed, body)

    embed_server.set_mode("hang")
    with pytest.raises(TimeoutError):
        await _post(embed, body, timeout=aiohttp.ClientTimeout(total=0.3))

    embed_server.reset()
    assert (await _post(embed, body))[0] == 200
    assert embed_server.embed_calls == 1 and len(embed_server.requests) == 1


async def test_stop_does_not_wait_for_hanging_request(embed_server: EmbeddingServer) -> None:
    embed_server.set_mode("hang")
    pending = asyncio.create_task(
        _post(f"{embed_server.url}/api/embed", {"model": "bge-m3", "input": "x"})
    )
    await asyncio.sleep(0.2)
    stopper = threading.Thread(target=lambda: (embed_server.stop(), embed_server.stop()))
    stopper.start()  # stop() twice: idempotent
    stopper.join(timeout=30)  # a deadline, not a measurement
    assert not stopper.is_alive(), "stop() waited for the hanging request"
    with pytest.raises(aiohttp.ClientError):
        await pending


async def test_restart_keeps_port() -> None:
    server = EmbeddingServer()
    server.start()
    port = server.port
    assert port != 0
    server.restart()
    assert server.port == port
    status, _ = await _get(f"{server.url}/api/tags")
    assert status == 200
    server.stop()
    assert not server.running
    with pytest.raises(aiohttp.ClientConnectionError):
        await _get(f"{server.url}/api/tags")


def test_control_from_subprocess(embed_server: EmbeddingServer) -> None:
    script = """
import json, sys, urllib.request, urllib.error
url = sys.argv[1]
def post(path, body):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
print(post("/_control", {"mode": "error503", "after": 1}))
print(post("/api/embed", {"model": "bge-m3", "input": "x"}))
print(post("/api/embed", {"model": "bge-m3", "input": "x"}))
"""
    out = subprocess.run(
        [sys.executable, "-c", script, embed_server.url],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.split() == ["200", "200", "503"]
    assert embed_server.mode.peek() == "error503"
    assert [r["path"] for r in embed_server.requests] == ["/api/embed", "/api/embed"]


# ---------------------------------------------------------------------- chat server
async def test_chat_text_and_tool_calls_non_stream(
    chat_server: ChatServer, client: openai.AsyncOpenAI
) -> None:
    chat_server.script(
        Reply.text("你好"),
        Reply.tool_call("save_memory", {"text": "喜欢苹果"}, ("save_memory", "{bad json")),
    )
    messages: list[Any] = [{"role": "user", "content": "hi"}]
    first = await client.chat.completions.create(model="m", messages=messages)
    assert first.choices[0].message.content == "你好"
    assert first.choices[0].finish_reason == "stop"
    assert first.usage is not None and first.usage.total_tokens == 18

    # A tool call cannot answer a request without tools: default text, reply stays queued.
    plain = await client.chat.completions.create(model="m", messages=messages)
    assert plain.choices[0].message.content == "好的"
    assert chat_server.pending == 1

    second = await client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
    calls = second.choices[0].message.tool_calls
    assert second.choices[0].finish_reason == "tool_calls"
    assert calls is not None and len(calls) == 2
    assert json.loads(calls[0].function.arguments) == {"text": "喜欢苹果"}  # type: ignore[union-attr]
    assert calls[1].function.arguments == "{bad json"  # type: ignore[union-attr]
    assert calls[0].id != calls[1].id and calls[0].id.startswith("call_")
    assert chat_server.pending == 0
    assert len(chat_server.requests) == 3 and chat_server.requests[2]["tools"] == TOOLS


async def test_chat_streaming(chat_server: ChatServer, client: openai.AsyncOpenAI) -> None:
    chat_server.script(
        Reply.text("这是一个比较长的流式回答"),
        Reply.tool_call("save_memory", {"text": "x"}, ("save_memory", {"text": "y"})),
    )
    messages: list[Any] = [{"role": "user", "content": "hi"}]
    stream = await client.chat.completions.create(
        model="m", messages=messages, stream=True, stream_options={"include_usage": True}
    )
    text, finish, usage = "", None, None
    async for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage.total_tokens
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    assert (text, finish, usage) == ("这是一个比较长的流式回答", "stop", 18)

    stream = await client.chat.completions.create(
        model="m", messages=messages, tools=TOOLS, stream=True
    )
    calls: dict[int, dict[str, str]] = {}
    async for chunk in stream:
        assert chunk.usage is None
        for choice in chunk.choices:
            for delta in choice.delta.tool_calls or []:
                call = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
                call["id"] += delta.id or ""
                if delta.function is not None:
                    call["name"] += delta.function.name or ""
                    call["arguments"] += delta.function.arguments or ""
            finish = choice.finish_reason or finish
    assert finish == "tool_calls"
    assert [json.loads(c["arguments"]) for c in calls.values()] == [{"text": "x"}, {"text": "y"}]
    assert {c["name"] for c in calls.values()} == {"save_memory"}
    assert len({c["id"] for c in calls.values()}) == 2


async def test_chat_report_check_rule_and_modes(
    chat_server: ChatServer, client: openai.AsyncOpenAI
) -> None:
    messages: list[Any] = [{"role": "user", "content": "hi"}]
    chat_server.script(Reply.text("scripted"))
    safety = await client.chat.completions.create(model="m", messages=messages, tools=REPORT_TOOL)
    assert safety.choices[0].message.content == "好的" and chat_server.pending == 1

    chat_server.set_rule(lambda body: Reply.text("ruled") if body["model"] == "r" else None)
    ruled = await client.chat.completions.create(model="r", messages=messages)
    assert ruled.choices[0].message.content == "ruled" and chat_server.pending == 1
    scripted = await client.chat.completions.create(model="m", messages=messages)
    assert scripted.choices[0].message.content == "scripted"

    chat_server.set_mode("error500", after=1)
    await client.chat.completions.create(model="m", messages=messages)
    with pytest.raises(openai.InternalServerError):
        await client.chat.completions.create(model="m", messages=messages)
    chat_server.set_mode("hang")
    with pytest.raises(openai.APITimeoutError):
        await client.chat.completions.create(model="m", messages=messages, timeout=0.3)

    chat_server.clear()
    assert chat_server.requests == [] and chat_server.pending == 0
    again = await client.chat.completions.create(model="m", messages=messages)
    assert again.choices[0].message.content == "好的"
    assert [m.id for m in (await client.models.list()).data] == ["mock-model"]


# ---------------------------------------------------------------------- chroma
@pytest.mark.timeout(60)
def test_chroma_server_persists_across_restart(tmp_path: Path) -> None:
    server = ChromaServer(tmp_path / "chroma")
    server.start()
    try:
        # embedding_function=None: Chroma's default one would try to download a model.
        # Clients are closed explicitly so no httpx sockets leak into later tests.
        query = embed_text("我很喜欢吃苹果", 8)
        with server.client() as client:
            collection = client.get_or_create_collection("memories", embedding_function=None)
            collection.add(
                ids=["apple", "trip"],
                embeddings=[embed_text("我喜欢吃苹果", 8), embed_text("明天去北京出差", 8)],
                documents=["我喜欢吃苹果", "明天去北京出差"],
            )
            assert collection.query(query_embeddings=query, n_results=1)["ids"] == [["apple"]]

        port = server.port
        server.restart()
        assert server.port == port
        with server.client() as client:
            collection = client.get_collection("memories", embedding_function=None)
            assert collection.count() == 2
            assert collection.query(query_embeddings=query, n_results=1)["ids"] == [["apple"]]
    finally:
        server.stop()
        server.stop()
    assert not server.running
    assert (tmp_path / "chroma.chroma.log").exists()
