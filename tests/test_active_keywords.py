"""Active memory without vectors (issue #47): recall and extraction's related memories by
keywords, with embeddings disabled (the embedder never called) or the service failing.

Real turns through the session's bot, store and servers; only the switch
``store.vectors.enabled`` (what ``EMBEDDING_ENABLED=false`` sets) is flipped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.active_helpers import active
from tests.events import group_event, private_event
from tests.group_helpers import block, say, turn_prompts
from tests.helpers import runtime
from tests.servers import ChatServer, EmbeddingServer

__all__ = ["active"]  # the fixture, imported for pytest

pytestmark = pytest.mark.usefixtures("whole_replies")

MARKER = "[memory-extraction]"


@pytest.fixture
def no_vectors(embed_server: EmbeddingServer) -> Iterator[EmbeddingServer]:
    """``EMBEDDING_ENABLED=false`` for the session's store; restored after."""
    vectors = runtime().store.vectors
    vectors.enabled = False
    try:
        yield embed_server
    finally:
        vectors.enabled = True
        vectors.breaker.success()


async def seed(uid: int, content: str, *, group_id: int | None = None) -> str:
    from amrita_plugin_memory.storage.keys import target_from_ids
    from amrita_plugin_memory.storage.scope import ScopeRules

    caller = ScopeRules().of_chat(target_from_ids(uid, group_id))
    result = await runtime().tools.write_memory(caller, {"content": content, "tags": ["测试"]})
    assert result["ok"] is True, result
    return str(result["memory"]["id"])


async def shown(chat_server: ChatServer, event: Any) -> str:
    """The ``<MEMORIES>`` block of the turn ``event`` ("" when none)."""
    chat_server.clear()
    await say(event)
    prompts = [p for p in turn_prompts(chat_server) if not p.startswith(MARKER)]
    prompt = prompts[-1]
    return block(prompt, "MEMORIES") if "<MEMORIES>" in prompt else ""


async def test_recall_by_keywords_with_embeddings_disabled(
    chat_server: ChatServer, active: Callable[..., Any], no_vectors: EmbeddingServer
) -> None:
    active(batch_messages=100, recall_top_k=3)
    uid, other = 5319001, 5319002
    await seed(uid, "用户养了一只橘猫，名字叫年糕")
    await seed(uid, "User's dog is called Biscuit and loves the beach")
    await seed(uid, "用户喜欢喝乌龙茶")
    await seed(other, "用户的橘猫年糕今年三岁，名字是奶奶取的")  # another user's
    calls = no_vectors.embed_calls

    body = await shown(chat_server, private_event(uid, "我的橘猫年糕叫什么名字来着"))
    assert "用户养了一只橘猫，名字叫年糕" in body
    assert "奶奶" not in body and "乌龙茶" not in body  # never another user's memory

    body = await shown(chat_server, private_event(uid, "Does Biscuit still love the beach?"))
    assert "Biscuit" in body and "橘猫" not in body

    for text in ("哈哈", "在吗", "今天天气怎么样", "tell me a joke"):
        assert await shown(chat_server, private_event(uid, text)) == "", text
    assert no_vectors.embed_calls == calls  # disabled: the embedder is never called


async def test_keyword_recall_keeps_group_privacy(
    chat_server: ChatServer, active: Callable[..., Any], no_vectors: EmbeddingServer
) -> None:
    active(batch_messages=100, recall_top_k=3)
    uid, gid = 5319011, 5319900
    await seed(uid, "用户在私聊说过：橘猫年糕的名字是外婆取的")
    await seed(uid, "用户在群里说过：橘猫年糕的名字很好听", group_id=gid)

    body = await shown(chat_server, group_event(uid, gid, "我家橘猫年糕的名字怎么样"))
    assert "用户在群里说过：橘猫年糕的名字很好听" in body
    assert "外婆" not in body  # said in private: never in a group's prompt

    body = await shown(chat_server, private_event(uid, "我家橘猫年糕的名字是谁取的"))
    assert "外婆" in body


async def test_recall_answers_by_keywords_while_the_service_fails(
    chat_server: ChatServer, active: Callable[..., Any], embed_server: EmbeddingServer
) -> None:
    service = active(batch_messages=100, recall_top_k=3)
    uid = 5319021
    await seed(uid, "用户的车牌号是沪A12345，停在B2层")
    embed_server.set_mode("error500")
    try:
        for _ in range(3):  # failing, then the breakers open: keywords each time
            body = await shown(chat_server, private_event(uid, "我的车牌号沪A12345停在哪一层"))
            assert "沪A12345" in body
        assert await shown(chat_server, private_event(uid, "哈哈")) == ""
        assert not service.recaller.breaker.allow() or not runtime().store.vectors.available
    finally:
        embed_server.set_mode("ok")
        service.recaller.breaker.success()
        runtime().store.vectors.breaker.success()


async def test_extraction_related_memories_without_vectors(
    active: Callable[..., Any], no_vectors: EmbeddingServer
) -> None:
    from amrita_plugin_memory.active import BatchKey, Turn
    from amrita_plugin_memory.storage.keys import user_key

    service = active(batch_messages=100, related_memories=5)
    uid = 5319031
    job = await seed(uid, "用户在海豚医疗做测试工程师")
    await seed(uid, "User's sister Anna lives in Berlin")
    calls = no_vectors.embed_calls
    key = BatchKey(str(uid), user_key(uid), "private")

    related = await service.extractor.related(
        key, [Turn("我从海豚医疗离职了，测试工程师不干了", "好的")]
    )
    assert [r.id for r in related][:1] == [job]
    related = await service.extractor.related(key, [Turn("Anna moved out of Berlin", "ok")])
    assert related and "Anna" in related[0].content
    assert no_vectors.embed_calls == calls


async def test_a_pending_memory_is_recalled_by_keywords_once_vectors_are_back(
    chat_server: ChatServer, active: Callable[..., Any], embed_server: EmbeddingServer
) -> None:
    active(batch_messages=100, recall_top_k=3, recall_min_similarity=0.99)
    uid = 5319041
    vectors = runtime().store.vectors
    vectors.enabled = False
    try:
        await seed(uid, "用户的车牌号是浙B67890，停在地下二层")  # pending: no vector yet
    finally:
        vectors.enabled = True
    # A vector for the message, a placeholder for the memory: judged by its keywords (in a
    # collection of only placeholders, of another dimension, the message too is searched
    # by keywords rather than failing).
    body = await shown(chat_server, private_event(uid, "我的车牌号浙B67890停在哪"))
    assert "浙B67890" in body
    assert await shown(chat_server, private_event(uid, "哈哈")) == ""
