"""An embedding outage through real chat turns (issue #47): nothing the user said is lost.

The session bot (NoneBot + OneBot V11 + Amrita, the plugin loaded) talks to the scripted
chat model; the scripted embedding service fails with HTTP 500 for a while. A
``write_memory`` in that time is kept (its result says so), the next turn's
``read_memory`` finds it by keywords, and once the service answers again the background
embedding gives it its vector without a restart: a question in other words finds it by
meaning.
"""

from __future__ import annotations

import asyncio
import time

from tests.chat import tool_results, turn, write_call
from tests.events import private_event
from tests.helpers import runtime, view_of
from tests.servers import ChatServer, EmbeddingServer, Reply

USER = 11471
PARTITION = f"QQPlatform_Private_{USER}"


async def _settled(memory_id: str, seconds: float = 60.0) -> bool:
    """Whether the memory got its vector within ``seconds`` (the background embedding)."""
    store = runtime().store
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got = await store.get(view_of(PARTITION), memory_id)
        if got is not None and not got.pending:
            return True
        await asyncio.sleep(0.2)
    return False


async def test_a_write_during_an_outage_is_kept_found_and_embedded_later(
    chat_server: ChatServer, embed_server: EmbeddingServer
) -> None:
    await turn(
        chat_server,
        private_event(USER, "记住我喜欢爬山"),
        write_call("用户喜欢爬山"),
        Reply.text("记住了"),
    )
    assert tool_results(chat_server)[0]["ok"] is True

    embed_server.set_mode("error500")
    try:
        await turn(
            chat_server,
            private_event(USER, "我家的猫叫年糕，记一下"),
            write_call("用户家的猫叫年糕"),
            Reply.text("好的"),
        )
        written = tool_results(chat_server)[0]
        assert written["ok"] is True, written
        assert "嵌入" in str(written), written  # it says meaning search comes later
        memory_id = written["memory"]["id"]

        await turn(
            chat_server,
            private_event(USER, "年糕是谁来着？"),
            Reply.tool_call("read_memory", {"query": "年糕", "scope": "user"}),
            Reply.text("是你的猫"),
        )
        found = tool_results(chat_server)[0]
        assert found["ok"] is True
        assert memory_id in [m["id"] for m in found["memories"]], found
    finally:
        embed_server.set_mode("ok")

    assert await _settled(memory_id), "the pending memory was not embedded after the outage"
    store = runtime().store
    vector = (await store.embedder.embed(["用户家的猫叫年糕"], "query"))[0]
    near = await store.query_vector(view_of(PARTITION), vector, top_k=3)
    assert near and near[0].id == memory_id
    assert all(r.id != memory_id for r in await store.pending_batch(1000))
