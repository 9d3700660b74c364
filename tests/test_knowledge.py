"""Knowledge base: files, index and vectors stay in step; startup validation repairs drift."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import env_for
from tests.lazy import lazy_import
from tests.servers import EmbeddingServer, embed_text

KB = lazy_import("amrita_plugin_memory.subconscious.knowledge_base")


@pytest.fixture
async def kb(tmp_path: Path, embed_server: EmbeddingServer) -> Any:
    from amrita_plugin_memory.embedding.client import EmbeddingClient
    from amrita_plugin_memory.storage.chroma.connection import ChromaConnection

    env = env_for("local")
    connection = ChromaConnection(env, tmp_path / "vector_db.chroma")
    embedder = EmbeddingClient.from_env(env)
    embedder.max_retries = 0
    logs: list[str] = []
    manager = KB.KnowledgeBaseManager(
        root=tmp_path,
        connection=connection,
        embedder=embedder,
        collection_name=f"kb-{uuid.uuid4().hex[:8]}",
        max_chars=200,
        log=logs.append,
    )
    manager.logs = logs
    yield manager
    await embedder.close()
    connection.close()


async def vectors(kb: Any) -> dict[str, str]:
    col = await kb.connection.get_collection(kb.collection_name)
    res = col.get(include=["metadatas"])
    return {i: m["checksum"] for i, m in zip(res["ids"], res["metadatas"], strict=True)}


async def assert_in_step(kb: Any) -> None:
    files = {p.stem.removeprefix("KNOWLEDGE_") for p in kb.dir.glob("KNOWLEDGE_*.md")}
    index = json.loads(kb.index_path.read_text(encoding="utf-8")) if kb.index_path.exists() else {}
    vecs = await vectors(kb)
    assert files == set(index) == set(vecs)
    for kid in files:
        entry = await kb.get(kid)
        assert index[kid]["checksum"] == vecs[kid] == entry.checksum


async def test_create_read_update_delete_keep_three_in_step(kb: Any) -> None:
    entry = await kb.create("Python 调试技巧", "用 pdb 与日志定位问题", "第一行\n第二行\n第三行")
    await assert_in_step(kb)
    assert kb.path_for(entry.kid).exists()
    window = await kb.read(entry.kid, start_line=2, end_line=3)
    assert window["lines"] == ["2: 第二行", "3: 第三行"] and window["total_lines"] == 3
    listed = await kb.list()
    assert [e["kid"] for e in listed] == [entry.kid] and listed[0]["title"] == "Python 调试技巧"

    await kb.update(entry.kid, body="新的正文\n用 breakpoint()")
    await assert_in_step(kb)
    hits = await kb.search("breakpoint 调试", top_k=3)
    assert hits[0]["kid"] == entry.kid and hits[0]["distance"] >= 0

    await kb.delete(entry.kid)
    await assert_in_step(kb)
    assert await kb.list() == []
    with pytest.raises(KB.KnowledgeError, match="不存在"):
        await kb.read(entry.kid)


async def test_header_values_cannot_break_the_file(kb: Any) -> None:
    entry = await kb.create(
        '标题 "引号"\n---\n换行', "摘要: 带冒号\n\n两个换行", "正文\n\n含空行\n---\n"
    )
    loaded = await kb.get(entry.kid)
    assert loaded.title == '标题 "引号" --- 换行'
    assert loaded.summary == "摘要: 带冒号 两个换行"
    assert loaded.body == "正文\n\n含空行\n---"
    await assert_in_step(kb)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"title": "", "summary": "s", "body": "b"}, "不能为空"),
        ({"title": "t" * 101, "summary": "s", "body": "b"}, "过长"),
        ({"title": "t", "summary": 3, "body": "b"}, "必须是字符串"),
        ({"title": "t", "summary": "s", "body": "  "}, "不能为空"),
        ({"title": "t", "summary": "s", "body": "长" * 201}, "正文过长"),
    ],
)
async def test_invalid_create_writes_nothing(kb: Any, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(KB.KnowledgeError, match=message):
        await kb.create(**kwargs)
    assert not kb.dir.exists() or not list(kb.dir.iterdir())


async def test_bad_kids(kb: Any) -> None:
    for kid in ["../../etc/passwd", "", 5, "ABC", "x" * 40]:
        with pytest.raises(KB.KnowledgeError):
            await kb.read(kid)
        with pytest.raises(KB.KnowledgeError):
            await kb.delete(kid)


async def test_embedding_down_keeps_the_text_found_by_keywords(
    kb: Any, embed_server: EmbeddingServer
) -> None:
    """The text is the source of truth (issue #47): kept without a vector, found by keywords,
    embedded by the next start-up validation."""
    embed_server.set_mode("error500")
    entry = await kb.create("面试经验", "二面要准备系统设计", "二面考了缓存与限流")
    assert [e["kid"] for e in await kb.list()] == [entry.kid]
    col = await kb.connection.get_collection(kb.collection_name)
    assert col.get(ids=[entry.kid])["ids"] == []  # no vector for it yet
    found = await kb.search("二面 限流", 3)
    assert found[0]["kid"] == entry.kid and "keyword_score" in found[0]
    embed_server.set_mode("ok")
    report = await kb.validate_on_startup()
    assert report.reembedded == [entry.kid]
    assert (await kb.search("限流", 1))[0]["kid"] == entry.kid


async def test_validate_repairs_every_kind_of_drift(kb: Any) -> None:
    a = await kb.create("A", "a", "甲")
    b = await kb.create("B", "b", "乙")
    c = await kb.create("C", "c", "丙")
    d = await kb.create("D", "d", "丁")
    # file without index entry
    index = json.loads(kb.index_path.read_text(encoding="utf-8"))
    del index[a.kid]
    # index entry without file
    kb.path_for(b.kid).unlink()
    kb.index_path.write_text(json.dumps(index), encoding="utf-8")
    # stale vector: file edited by hand
    entry = await kb.get(c.kid)
    entry.body = "手工修改的丙"
    kb.path_for(c.kid).write_text(entry.render(), encoding="utf-8")
    # missing vector
    col = await kb.connection.get_collection(kb.collection_name)
    col.delete(ids=[d.kid])
    # unreadable file is reported, not fatal
    (kb.dir / "KNOWLEDGE_broken.md").write_text("garbage", encoding="utf-8")

    report = await kb.validate_on_startup()
    assert report.indexed_files == [a.kid]
    assert report.dropped_index_entries == [b.kid]
    assert sorted(report.reembedded) == sorted([c.kid, d.kid])
    assert report.removed_vectors == [b.kid]
    assert report.unreadable_files == ["KNOWLEDGE_broken.md"]
    (kb.dir / "KNOWLEDGE_broken.md").unlink()
    await assert_in_step(kb)
    assert any("知识库校验修复" in line for line in kb.logs)
    # The re-embedded vector is the one of the edited text.
    stored = col.get(ids=[c.kid], include=["embeddings"])["embeddings"][0]
    expected = embed_text((await kb.get(c.kid)).document, 384)
    assert list(stored) == pytest.approx(expected, abs=1e-5)

    again = await kb.validate_on_startup()
    assert not again.changed
