"""Pending memories in the store (issue #47): kept during an outage, found by keywords,
never a nearest neighbour, cleared by an edit or their vector, carried by the archive."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import new_memory, view_of
from tests.servers import EmbeddingServer

ALICE = "QQPlatform_Private_10001"
BOB = "QQPlatform_Private_10002"


def _reset(store: Any) -> None:
    """The service answers again: close the store's breaker (its cooldown is seconds)."""
    store.vectors.breaker.success()


async def _raw_flag(store: Any, memory_id: str) -> Any:
    from amrita_plugin_memory.core.records import PENDING_KEY

    res = await store._run(lambda c: c.get(ids=[memory_id], include=["metadatas"]))
    return (res["metadatas"] or [{}])[0].get(PENDING_KEY)


async def test_a_write_during_an_outage_is_kept_and_found_by_keywords(
    store: Any, embed_server: EmbeddingServer
) -> None:
    await store.add(new_memory(ALICE, "user", "用户喜欢吃苹果"))
    embed_server.set_mode("error500")
    result = await store.write(new_memory(ALICE, "user", "用户的猫叫年糕，三岁了"))
    assert result.pending and result.record.pending
    assert await _raw_flag(store, result.record.id) is True
    assert await store.count(view_of(ALICE)) == 2
    # Still down: the question itself is answered by keywords.
    hits = await store.query(view_of(ALICE), "我的猫叫什么名字", top_k=3)
    assert hits and hits[0].id == result.record.id and hits[0].distance is None
    # Never from another partition, by any channel.
    assert await store.query(view_of(BOB), "猫 年糕", top_k=3) == []
    # The service is back: a question has a vector; the pending memory is still found by
    # full-weight keywords (Chinese terms count 0.4 in the hybrid ranking otherwise).
    embed_server.set_mode("ok")
    _reset(store)
    hits = await store.query(view_of(ALICE), "年糕几岁了", top_k=2)
    assert hits[0].id == result.record.id
    assert await store.count_pending() == 1
    assert [r.id for r in await store.pending_batch(10)] == [result.record.id]


async def test_a_pending_memory_is_never_a_nearest_neighbour(
    store: Any, embed_server: EmbeddingServer
) -> None:
    kept = await store.add(new_memory(ALICE, "user", "用户住在上海"))
    embed_server.set_mode("close")
    pending = await store.add(new_memory(ALICE, "user", "用户住在杭州"))
    assert pending.pending
    embed_server.set_mode("ok")
    _reset(store)
    from amrita_plugin_memory.storage.partition.retrieval import RetrievalSettings

    vector = (await store.embedder.embed(["用户住在杭州"], "query"))[0]
    near = await store.query_vector(view_of(ALICE), vector, top_k=5)
    assert [r.id for r in near] == [kept.id]
    store.index.max_bytes = 0  # Chroma answers (its where leaves the placeholder out)
    store.index.clear()
    near = await store.query_vector(view_of(ALICE), vector, top_k=5)
    assert [r.id for r in near] == [kept.id]
    assert RetrievalSettings().hybrid  # the default ranking is the one above


async def test_settle_stores_the_vector_and_clears_the_flag(
    store: Any, embed_server: EmbeddingServer
) -> None:
    await store.add(new_memory(BOB, "user", "Bob 在学法语"))  # the collection's dimension
    embed_server.set_mode("error503")
    pending = (await store.write(new_memory(ALICE, "user", "用户在学日语"))).record
    embed_server.set_mode("ok")
    _reset(store)
    vector = (await store.embedder.embed([pending.content]))[0]
    assert await store.settle(pending, vector) == "embedded"
    assert await _raw_flag(store, pending.id) is False
    assert await store.count_pending() == 0
    near = await store.query_vector(view_of(ALICE), vector, top_k=1)
    assert near[0].id == pending.id and near[0].distance == pytest.approx(0, abs=1e-3)
    # Settled once: a second settle of the same record does nothing.
    assert await store.settle(pending, vector) == "skipped"


async def test_settle_merges_a_repeat_and_skips_an_edited_memory(
    store: Any, embed_server: EmbeddingServer
) -> None:
    older = await store.add(new_memory(ALICE, "user", "用户对花生过敏", tags=["健康"]))
    embed_server.set_mode("error500")
    repeat = (await store.write(new_memory(ALICE, "user", "用户对花生过敏"))).record
    edited = (await store.write(new_memory(ALICE, "user", "用户下周去东京"))).record
    assert repeat.pending and edited.pending
    embed_server.set_mode("ok")
    _reset(store)
    # Edited meanwhile (the edit embeds its new text): the old text's vector is not written.
    changed = await store.update(ALICE, edited.id, content="用户下周去大阪")
    assert changed is not None and not changed.pending
    assert await _raw_flag(store, edited.id) is False
    stale = (await store.embedder.embed([edited.content]))[0]
    assert await store.settle(edited, stale) == "skipped"
    vector = (await store.embedder.embed([repeat.content]))[0]
    assert await store.settle(repeat, vector) == "merged"
    assert await store.get(view_of(ALICE), repeat.id) is None
    archived = await store.archive.get(repeat.id)
    assert archived is not None and archived[0].reason == "merged"
    assert (await store.get(view_of(ALICE), older.id)) is not None
    assert await store.count_pending() == 0


async def test_an_update_during_an_outage_keeps_the_new_text_pending(
    store: Any, embed_server: EmbeddingServer
) -> None:
    rec = await store.add(new_memory(ALICE, "user", "用户在北京工作"))
    embed_server.set_mode("error500")
    changed = await store.update(ALICE, rec.id, content="用户搬到深圳工作了")
    assert changed is not None and changed.pending
    got = await store.get(view_of(ALICE), rec.id)
    assert got is not None and got.content == "用户搬到深圳工作了" and got.pending
    # The previous text is in the archive with its real vector (restorable as before).
    versions = [r for r in await store.archive.list(view_of(ALICE)) if r.memory_id == rec.id]
    assert [v.record.content for v in versions] == ["用户在北京工作"]


async def test_a_pending_memory_deleted_and_restored_stays_pending(
    store: Any, embed_server: EmbeddingServer
) -> None:
    from amrita_plugin_memory.upkeep.archive.restore import restore

    await store.add(new_memory(BOB, "user", "Bob 的生日是六月"))
    embed_server.set_mode("error500")
    rec = (await store.write(new_memory(ALICE, "user", "用户的生日是五月三日"))).record
    assert await store.delete(ALICE, rec.id)
    rows = await store.archive.list(view_of(ALICE))
    assert rows and rows[0].record.pending
    await restore(store, rows[0].id, partition=ALICE)
    back = await store.get(view_of(ALICE), rec.id)
    assert back is not None and back.pending
    assert await store.count_pending() == 1


async def test_keyword_only_store_never_calls_the_service(
    store: Any, embed_server: EmbeddingServer
) -> None:
    store.vectors.enabled = False
    before = embed_server.embed_calls
    a = await store.write(new_memory(ALICE, "user", "User's dog is called Biscuit"))
    b = await store.write(new_memory(ALICE, "user", "用户喜欢喝乌龙茶"))
    assert a.pending and b.pending
    assert [r.id for r in await store.query(view_of(ALICE), "what is my dog's name?")][:1] == [
        a.record.id
    ]
    assert [r.id for r in await store.query(view_of(ALICE), "我平时爱喝乌龙茶吗")][:1] == [
        b.record.id
    ]
    assert embed_server.embed_calls == before
    exported = a.record.to_json()
    assert exported["pending"] is True


async def test_vectors_of_another_dimension_keep_the_write_pending(
    store: Any, embed_server: EmbeddingServer
) -> None:
    """A model swapped behind the service's name: the text is kept, the read answers by
    keywords, nothing of another dimension reaches the collection."""
    await store.add(new_memory(ALICE, "user", "用户喜欢爬山"))
    embed_server.set_mode("wrong_dim")
    kept = await store.write(new_memory(ALICE, "user", "用户养了一只柯基叫豆豆"))
    assert kept.pending
    hits = await store.query(view_of(ALICE), "豆豆是什么狗")
    assert hits and hits[0].id == kept.record.id
    changed = await store.update(ALICE, kept.record.id, content="用户养了一只柯基叫豆豆，两岁")
    assert changed is not None and changed.pending


async def test_keyword_only_read_puts_the_shorter_of_equal_matches_first(store: Any) -> None:
    """Without vectors, memories holding the same share of the question's keywords rank
    shorter first (not by their random ids)."""
    store.vectors.enabled = False
    long = await store.write(
        new_memory(ALICE, "user", "Mochi sleeps on the sofa by the window every afternoon")
    )
    short = await store.write(new_memory(ALICE, "user", "User's cat is Mochi"))
    got = [r.id for r in await store.query(view_of(ALICE), "Mochi?")]
    assert got[:2] == [short.record.id, long.record.id]


async def test_keyword_only_read_keeps_another_person_apart(store: Any) -> None:
    """The shorter-first rule only orders equal matches: a question naming mom gets mom's
    number first, one about the user's own number the user's (shorter) memory."""
    store.vectors.enabled = False
    mom = await store.write(new_memory(ALICE, "user", "User's mom's phone number is 13900001111"))
    own = await store.write(new_memory(ALICE, "user", "User's phone number is 13800002222"))
    got = [r.id for r in await store.query(view_of(ALICE), "What is mom's phone number?")]
    assert got[:1] == [mom.record.id]
    got = [r.id for r in await store.query(view_of(ALICE), "What is my phone number?")]
    assert got[:1] == [own.record.id]
