"""Memories the published ``amrita-plugin-memory`` 0.8.1 wrote, taken over in-process, on an
embedded store and on the session's ``chroma run``: the rows of the committed fixture
(``tests/published/bot-0.8.1``, with their vectors) copied into a collection of their own,
then the start-up check's adoption (``embedding/adoption``) and fingerprint reading.

The bot process on the fixture itself (chat tools, commands, a kill half-way) is
``tests/test_published_bot.py``.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.botproject import make_runtime, snapshot
from tests.lazy import lazy_import
from tests.published_data import (
    CAT,
    CLUB,
    MEMORY_COLLECTION,
    PEANUT,
    TRIP,
    PublishedCollection,
    published_collections,
)
from tests.servers import ChromaServer, EmbeddingServer

R = lazy_import("amrita_plugin_memory.core.records")
PM = lazy_import("amrita_plugin_memory.storage.published.memories")
AD = lazy_import("amrita_plugin_memory.embedding.adoption")
E = lazy_import("amrita_plugin_memory.embedding")
BK = lazy_import("amrita_plugin_memory.embedding.backup")
FP = lazy_import("amrita_plugin_memory.embedding.fingerprint")

PUBLISHED_KEYS = ("embed_fingerprint", "embed_protocol", "embed_model", "embed_base_url")


@pytest.fixture(params=["local", "remote"])
async def rt(
    request: pytest.FixtureRequest, tmp_path: Path, embed_server: EmbeddingServer
) -> AsyncIterator[Any]:
    """A runtime on collections of its own (memories, archive, knowledge), either mode."""
    chroma: ChromaServer | None = (
        request.getfixturevalue("chroma_server") if request.param == "remote" else None
    )
    suffix = uuid.uuid4().hex[:10]
    runtime = make_runtime(
        tmp_path / "data",
        mode=request.param,
        chroma=chroma,
        memory_name=f"pub-{suffix}",
        knowledge_name=f"pubkb-{suffix}",
        embed_mismatch_policy="never",
    )
    yield runtime
    if request.param == "remote":
        for name in (runtime.store.name, runtime.store.archive.name, f"pubkb-{suffix}"):
            try:
                await runtime.connection.delete_collection(name)
            except Exception:
                pass
    await runtime.close()


async def load_published(rt: Any, *, metadata: dict[str, Any] | None = None) -> PublishedCollection:
    """The fixture's memories (ids, texts, metadata, vectors) in the runtime's collection."""
    published = published_collections()[MEMORY_COLLECTION]
    col = await rt.connection.get_collection(rt.store.name)
    meta = published.metadata if metadata is None else metadata
    await rt.connection.run(col.modify, metadata=meta)
    await rt.connection.run(
        functools.partial(
            col.add,
            ids=published.ids,
            documents=published.documents,
            metadatas=published.metadatas,
            embeddings=published.embeddings,
        )
    )
    rt.store.invalidate()
    return published


async def vectors(rt: Any) -> dict[str, list[float]]:
    col = await rt.connection.get_collection(rt.store.name, create=False)
    res = await rt.connection.run(lambda: col.get(include=["embeddings"]))
    return {
        i: [round(float(x), 6) for x in v]
        for i, v in zip(res["ids"], res["embeddings"], strict=True)
    }


def by_text(snap: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {doc: meta for doc, meta in snap.values()}


def test_published_metadata_in_this_plugins_form() -> None:
    group = PM.adopted_metadata(
        {
            "scope": "group",
            "user_id": "QQPlatform_Group_20001",
            "tags": "活动， 读书会,活动",
            "importance": "medium",
            "created_at": "2026-12-03T09:42:58.499464+00:00",
            "legacy": 1,
        }
    )
    assert group == {
        "scope": "group",
        "user_id": "QQPlatform_Group_20001",
        "tags": '["活动", "读书会"]',
        "importance": "medium",
        "created_at": "2026-12-03T09:42:58+00:00",
        "updated_at": "2026-12-03T09:42:58+00:00",
        "origin": "group:20001",
        "from_group": True,
        "legacy": 1,
    }
    personal = PM.adopted_metadata(
        {
            "scope": "user",
            "user_id": "QQPlatform_Private_10001",
            "tags": "2024",
            "importance": "urgent",
            "created_at": "2026-12-03T17:42:58.5+08:00",
        }
    )
    assert personal["origin"] == "private" and personal["from_group"] is False
    assert personal["tags"] == '["2024"]' and personal["importance"] == "medium"
    assert personal["created_at"] == "2026-12-03T09:42:58+00:00"
    assert not PM.needs_adoption(personal) and PM.needs_adoption({"scope": "user"})
    # A plain string that happens to be JSON is still the tags the model wrote.
    assert R.decode_tags("2024") == ["2024"] and R.decode_tags('["a", "b"]') == ["a", "b"]
    assert R.decode_tags("宠物,猫") == ["宠物", "猫"]


async def test_published_memories_are_adopted_once_after_a_backup(rt: Any) -> None:
    published = await load_published(rt)
    before_vectors = await vectors(rt)
    result = E.run_startup_check(rt.maintenance, interactive=False)
    assert result.ok and result.adoption is not None
    assert result.adoption.adopted == 4 and not result.adoption.resumed
    backups = BK.list_backups(rt.config.backup_dir)
    assert [b.path.name for b in backups] == [result.adoption.backup]
    # The backup holds the rows exactly as the published plugin left them.
    _, saved = BK.load_backup(backups[0].path)
    saved_rows = {i.id: (i.document, i.metadata) for i in saved[rt.store.name].items}
    assert saved_rows == {
        i: (d, m)
        for i, d, m in zip(published.ids, published.documents, published.metadatas, strict=True)
    }

    rows = by_text(await snapshot(rt, rt.store.name))
    assert set(rows) == {CAT, TRIP, PEANUT, CLUB}
    original = {d: m for d, m in zip(published.documents, published.metadatas, strict=True)}
    for text, meta in rows.items():
        assert meta == PM.adopted_metadata(original[text])
        assert (
            meta["updated_at"] == meta["created_at"] == original[text]["created_at"][:19] + "+00:00"
        )
    assert rows[CLUB]["origin"] == "group:20001" and rows[CLUB]["from_group"] is True
    assert {rows[t]["origin"] for t in (CAT, TRIP, PEANUT)} == {"private"}
    assert json.loads(rows[CAT]["tags"]) == ["宠物", "猫"]
    assert await vectors(rt) == before_vectors  # text and vectors untouched
    meta = await rt.store.get_metadata()
    assert meta[PM.META_FORMAT] == PM.META_FORMAT_CURRENT
    assert meta[AD.META_ADOPTION_BACKUP] == result.adoption.backup

    # Read as this plugin's own: tags, dates, origin.
    cat = R.MemoryRecord.from_chroma("cat", CAT, rows[CAT])
    assert cat.tags == ["宠物", "猫"] and cat.origin == "private"
    assert cat.created_at == cat.updated_at == rows[CAT]["created_at"]

    # Every later start: one metadata read, nothing rewritten, no second backup.
    again = E.run_startup_check(rt.maintenance, interactive=False)
    assert again.adoption is not None and again.adoption.skipped
    assert len(BK.list_backups(rt.config.backup_dir)) == 1
    assert by_text(await snapshot(rt, rt.store.name)) == rows


async def test_an_interrupted_adoption_is_finished_without_a_second_backup(rt: Any) -> None:
    """What a kill half-way leaves (the backup recorded, some rows rewritten) is finished
    by the next start: every row rewritten once, to the same metadata, no new backup."""
    published = await load_published(rt)
    first = await BK.create_backup(rt.maintenance)
    await rt.store.set_meta({AD.META_ADOPTION_BACKUP: first.path.name})
    done = dict(zip(published.ids[:2], published.metadatas[:2], strict=True))
    await rt.store.rewrite_metadata({i: PM.adopted_metadata(m) for i, m in done.items()})

    result = E.run_startup_check(rt.maintenance, interactive=False)
    assert result.adoption is not None and result.adoption.resumed
    assert result.adoption.adopted == 2 and result.adoption.backup == first.path.name
    assert [b.path for b in BK.list_backups(rt.config.backup_dir)] == [first.path]
    snap = await snapshot(rt, rt.store.name)
    assert sorted(snap) == sorted(published.ids)  # every memory exactly once
    for memory_id, meta in zip(published.ids, published.metadatas, strict=True):
        assert snap[memory_id][1] == PM.adopted_metadata(meta)


async def test_an_own_store_is_only_marked(rt: Any) -> None:
    """A store of this plugin (every row has ``updated_at``): nothing rewritten, no backup."""
    from tests.botproject import ALICE, sample_memories, seed

    await seed(rt, rt.store.name, sample_memories(3, ALICE))
    before = await snapshot(rt, rt.store.name)
    result = E.run_startup_check(rt.maintenance, interactive=False)
    assert result.adoption is not None and result.adoption.adopted == 0
    assert not rt.config.backup_dir.exists()
    assert await snapshot(rt, rt.store.name) == before
    assert (await rt.store.get_metadata())[PM.META_FORMAT] == PM.META_FORMAT_CURRENT


async def test_the_published_fingerprint_of_the_same_service_needs_no_re_embedding(
    rt: Any, embed_server: EmbeddingServer
) -> None:
    """The published plugin recorded this very service and model (its keys, its raw URL):
    the fingerprint is taken over, nothing is re-embedded, its keys stay (still true)."""
    from tests.conftest import EMBED_MODEL

    published = published_collections()[MEMORY_COLLECTION].metadata
    url = embed_server.url + "/"  # as the operator wrote it: another spelling, same server
    raw = f"ollama-embed|{EMBED_MODEL}|{url}"
    import hashlib

    same = {
        **published,
        "embed_protocol": "ollama-embed",
        "embed_model": EMBED_MODEL,
        "embed_base_url": url,
        "embed_fingerprint": hashlib.sha256(raw.encode()).hexdigest(),
    }
    await load_published(rt, metadata=same)
    before = await vectors(rt)
    result = E.run_startup_check(rt.maintenance, interactive=False)
    assert (result.ok, result.action) == (True, "match"), result.message
    assert result.stored is not None and result.stored.fingerprint == result.current.fingerprint
    meta = await rt.store.get_metadata()
    assert meta["embedding_fingerprint"] == result.current.fingerprint
    assert all(meta[k] == same[k] for k in PUBLISHED_KEYS)
    assert await vectors(rt) == before
    assert [b.path.name for b in BK.list_backups(rt.config.backup_dir)] == [result.adoption.backup]


async def test_another_models_published_fingerprint_is_a_mismatch_and_goes_with_a_remap(
    rt: Any, tmp_path: Path
) -> None:
    await load_published(rt)  # recorded http://127.0.0.1:40237, a server that is gone
    kept = E.run_startup_check(rt.maintenance, interactive=False)
    assert kept.action == "kept"
    assert kept.stored is not None and kept.stored.published
    assert "已发布的 amrita-plugin-memory 记录" in kept.message
    assert "nomic-embed-text:latest @ http://127.0.0.1:40237" in kept.message

    await E.remap(rt.maintenance)
    meta = await rt.store.get_metadata()
    assert not any(k in meta for k in PUBLISHED_KEYS)  # a switch back must not trust them
    assert meta[PM.META_FORMAT] == PM.META_FORMAT_CURRENT  # the adoption's marks survive
    rows = by_text(await snapshot(rt, rt.store.name))
    assert set(rows) == {CAT, TRIP, PEANUT, CLUB} and all("updated_at" in m for m in rows.values())


async def test_their_dates_rank_like_ours_before_and_after_the_adoption(tmp_path: Path) -> None:
    """A question naming a day prefers what the published plugin wrote that day, whether
    its rows are still in its form or already in this plugin's (a real model, as in
    ``tests/test_time_ranking.py``)."""
    from tests.test_time_ranking import COOKING, NOW, _top

    rt = make_runtime(
        tmp_path,
        embedding_proctol="local",
        embedding_model_name="auto",
        embed_mismatch_policy="never",
    )
    rt.embedder.timeout = 60.0
    rt.store.clock = lambda: NOW.isoformat(timespec="seconds")
    try:
        uid = 50101
        texts = [text for _, text in COOKING]
        col = await rt.connection.get_collection(rt.store.name)
        await rt.connection.run(
            functools.partial(
                col.add,
                ids=[f"{n:032x}" for n in range(len(COOKING))],
                documents=texts,
                embeddings=await rt.embedder.embed(texts),
                metadatas=[
                    {  # as the published plugin's write_memory stores a memory
                        "scope": "user",
                        "user_id": f"QQPlatform_Private_{uid}",
                        "tags": "日常",
                        "importance": "medium",
                        "created_at": when.replace(microsecond=250000).isoformat(),
                    }
                    for when, _ in COOKING
                ],
            )
        )
        rt.store.invalidate()
        for stage in ("published form", "adopted"):
            assert (await _top(rt, uid, "3月5号我做了什么菜？"))[0] == COOKING[3][1], stage
            assert (await _top(rt, uid, "3月3号那天晚上我做了什么菜？"))[0] == COOKING[1][1], stage
            first = await _top(rt, uid, "我们第一次聊天的时候，我跟你说了什么？")
            assert first[0] == COOKING[0][1], stage
            if stage == "published form":
                result = E.run_startup_check(rt.maintenance, interactive=False)
                assert result.adoption is not None and result.adoption.adopted == len(COOKING)
    finally:
        await rt.close()
