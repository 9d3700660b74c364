"""``EMBEDDING_ENABLED=false``: memory with no embedding model at all (issue #47).

Real runtimes on embedded Chroma; the embedding URL points at a port nothing listens on
(and the session's scripted service is watched: no request reaches it). Writes and
reads work by keywords, in Chinese and English; status and the start-up check say which
mode runs; the L3 knowledge base keeps and finds its entries; turning embeddings on
later embeds every memory (backup first), turning them off again keeps the vectors.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.botproject import make_runtime
from tests.helpers import partition, view_of
from tests.lazy import lazy_import
from tests.servers import EmbeddingServer

E = lazy_import("amrita_plugin_memory.embedding", "amrita_plugin_memory.embedding.fingerprint")
R = lazy_import("amrita_plugin_memory.embedding.report_json")
K = lazy_import("amrita_plugin_memory.storage.keys", "amrita_plugin_memory.adapters.events")
T = lazy_import("amrita_plugin_memory.storage.scope")
KB = lazy_import("amrita_plugin_memory.subconscious.knowledge_base")

USER = 16001
OTHER = 16002
NOWHERE = "http://127.0.0.1:9"  # discard port: nothing answers


def _caller(uid: int = USER) -> Any:
    return T.ScopeRules().of_chat(K.target_from_ids(uid))


@pytest.fixture
async def runtimes(embed_server: EmbeddingServer) -> AsyncIterator[Callable[..., Any]]:
    made: list[Any] = []

    def factory(data_dir: Path, **kwargs: Any) -> Any:
        rt = make_runtime(data_dir, **kwargs)
        made.append(rt)
        return rt

    yield factory
    for rt in made:
        await rt.close()


def _off(runtimes: Callable[..., Any], data: Path) -> Any:
    return runtimes(data, embedding_enabled=False, embedding_model_url=NOWHERE)


async def _write(rt: Any, content: str, uid: int = USER) -> dict[str, Any]:
    return await rt.tools.write_memory(
        _caller(uid), {"content": content, "tags": ["测试"], "importance": "medium"}
    )


async def _read(rt: Any, query: str, uid: int = USER) -> list[str]:
    got = await rt.tools.read_memory(_caller(uid), {"query": query, "top_k": 3})
    assert got["ok"] is True, got
    return [m["content"] for m in got["memories"]]


async def test_memories_are_written_and_found_by_keywords_with_no_embedding_model(
    tmp_path: Path, runtimes: Callable[..., Any], embed_server: EmbeddingServer
) -> None:
    rt = _off(runtimes, tmp_path)
    check = await E.run_startup_check_async(
        rt.maintenance, interactive=False, confirm=lambda q: False
    )
    assert (check.ok, check.action) == (True, "keyword_only")
    assert "EMBEDDING_ENABLED=false" in rt.embedder.describe()
    calls = embed_server.embed_calls
    for text in (
        "用户养了一只橘猫，名字叫年糕",
        "用户在学日语，每周三上课",
        "The user drives a blue Volvo",
    ):
        written = await _write(rt, text)
        assert written["ok"] is True, written
        assert "嵌入" not in str(written)  # no "later": nothing will embed it in this mode
    await _write(rt, "用户的猫叫汤圆", uid=OTHER)
    assert (await _read(rt, "我的猫叫什么名字"))[0] == "用户养了一只橘猫，名字叫年糕"
    assert (await _read(rt, "日语课是哪天"))[0] == "用户在学日语，每周三上课"
    assert (await _read(rt, "what car do I drive"))[0] == "The user drives a blue Volvo"
    assert "用户的猫叫汤圆" not in await _read(rt, "猫 汤圆")  # another user's, never
    assert embed_server.embed_calls == calls  # no request anywhere
    # Status says the mode and how many wait for a vector.
    report = R.status_json(await E.collect_status(rt.maintenance), rt.config.backup_dir)
    assert report["keyword_only"] is True and report["vector_pending"] == 4
    assert "EMBEDDING_ENABLED=false" in report["fingerprint"]["state"]
    # The background embedding does not even start.
    await rt.pending.start()
    assert rt.pending._task is None
    assert (await rt.pending.run_once()).embedded == 0


async def test_turning_embeddings_on_embeds_every_memory_and_off_keeps_the_vectors(
    tmp_path: Path, runtimes: Callable[..., Any], embed_server: EmbeddingServer
) -> None:
    off = _off(runtimes, tmp_path)
    for text in ("用户喜欢喝乌龙茶", "用户的生日是三月五日"):
        assert (await _write(off, text))["ok"]
    await off.close()

    on = runtimes(tmp_path, embed_mismatch_policy="never")  # the policy does not matter here
    check = await E.run_startup_check_async(
        on.maintenance, interactive=False, confirm=lambda q: False
    )
    assert check.action == "remapped", check.message
    assert list(on.config.backup_dir.glob("*"))  # backed up first
    assert await on.store.count_pending() == 0
    assert await on.store.stored_dimension() == 384
    vector = (await on.embedder.embed(["用户喜欢喝乌龙茶"], "query"))[0]
    view = view_of(partition(USER))
    near = await on.store.query_vector(view, vector, top_k=1)
    assert near[0].content == "用户喜欢喝乌龙茶"
    stored = await E.stored_fingerprint(on.store)
    assert stored is not None
    await on.close()

    again = _off(runtimes, tmp_path)  # off again: nothing re-embedded, nothing dropped
    check = await E.run_startup_check_async(
        again.maintenance, interactive=False, confirm=lambda q: False
    )
    assert check.action == "keyword_only"
    assert await again.store.count_pending() == 0
    assert (await E.stored_fingerprint(again.store)) == stored
    assert (await _write(again, "用户下个月搬家"))["ok"]
    assert await again.store.count_pending() == 1  # the collection's dimension, kept
    assert await again.store.stored_dimension() == 384


async def test_the_knowledge_base_keeps_and_finds_entries_by_keywords(
    tmp_path: Path, runtimes: Callable[..., Any], embed_server: EmbeddingServer
) -> None:
    rt = _off(runtimes, tmp_path)
    kb = KB.KnowledgeBaseManager(
        root=tmp_path / "kb",
        connection=rt.connection,
        embedder=rt.embedder,
        collection_name="kb-keywords",
        max_chars=500,
    )
    entry = await kb.create("茶的偏好", "用户偏好的茶", "用户最喜欢乌龙茶，不喝咖啡")
    await kb.create("出行", "用户的交通方式", "The user drives a blue Volvo to work")
    found = await kb.search("乌龙茶", 3)
    assert found[0]["kid"] == entry.kid
    assert (await kb.search("Volvo", 3))[0]["title"] == "出行"
    # Embeddings on: the start-up validation embeds the entries kept without a vector.
    on = runtimes(tmp_path / "on")
    kb_on = KB.KnowledgeBaseManager(
        root=tmp_path / "kb",
        connection=rt.connection,
        embedder=on.embedder,
        collection_name="kb-keywords",
        max_chars=500,
    )
    report = await kb_on.validate_on_startup()
    assert len(report.reembedded) == 2 and entry.kid in report.reembedded
    hits = await kb_on.search("最喜欢喝的茶", 1)
    assert hits[0]["kid"] == entry.kid and "distance" in hits[0]
