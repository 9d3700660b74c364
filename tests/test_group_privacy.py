"""What a user said in private stays private: L2 memory origins through real chat turns.

A memory records where it was written (``origin``: ``private`` or
``group:<gid>``). In a group, ``read_memory`` / ``list_memory`` with
``scope=user`` return only the speaker's memories written in a group, unless
``private_memories_in_groups = true``; in private chat the user sees all of
their memories. Memories from before origins count as private.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.events import group_event, private_event
from tests.group_helpers import say
from tests.helpers import partition, runtime
from tests.servers import ChatServer, Reply

pytestmark = pytest.mark.usefixtures("whole_replies")


@pytest.fixture
def private_in_groups() -> Iterator[Any]:
    tools = runtime().tools
    saved = tools.private_memories_in_groups
    yield tools
    tools.private_memories_in_groups = saved


def results(server: ChatServer) -> list[dict[str, Any]]:
    """This turn's tool results, parsed, in order (first seen; history excluded)."""
    seen: dict[str, dict[str, Any]] = {}
    requests = [
        r
        for r in server.requests
        if [t["function"]["name"] for t in r.get("tools") or []] != ["report"]
    ]
    history = {m.get("tool_call_id") for m in requests[0]["messages"]} if requests else set()
    for request in requests:
        for message in request["messages"]:
            call_id = message.get("tool_call_id")
            if message["role"] == "tool" and call_id not in seen and call_id not in history:
                try:
                    seen[call_id] = json.loads(message["content"])
                except ValueError:
                    seen[call_id] = {"raw": message["content"]}
    return list(seen.values())


async def turn(server: ChatServer, event: Any, *replies: Reply) -> list[dict[str, Any]]:
    server.clear()
    server.script(*replies)
    await say(event)
    return results(server)


def write(content: str) -> Reply:
    args = {"content": content, "tags": ["测试"], "importance": "medium", "scope": "user"}
    return Reply.tool_call("write_memory", args)


READ = Reply.tool_call("read_memory", {"query": "喜欢", "top_k": 10, "scope": "user"})
LIST = Reply.tool_call("list_memory", {"limit": 20, "offset": 0, "scope": "user"})


def contents(result: dict[str, Any]) -> set[str]:
    return {m["content"] for m in result["memories"]}


async def test_private_memories_stay_out_of_groups_and_group_ones_reach_private(
    chat_server: ChatServer, private_in_groups: Any
) -> None:
    uid, gid = 4501001, 45001
    rt = runtime()
    # A memory from before origins (no origin metadata at all) counts as private.
    col = await rt.store.collection()
    vector = (await rt.embedder.embed(["旧记忆：用户喜欢老歌"]))[0]
    await rt.connection.run(
        lambda: col.add(
            ids=["legacy-privacy-1"],
            documents=["旧记忆：用户喜欢老歌"],
            embeddings=[vector],
            metadatas=[{"user_id": partition(uid), "scope": "user", "tags": "[]"}],
        )
    )
    (written,) = await turn(
        chat_server, private_event(uid, "记住我喜欢猫"), write("私聊：用户喜欢猫")
    )
    assert written["ok"]
    stored = await rt.store.get(partition(uid), written["memory"]["id"])
    assert stored is not None and stored.origin == "private"

    read, listed = await turn(chat_server, group_event(uid, gid, "我喜欢什么？"), READ, LIST)
    assert read["ok"] and read["memories"] == []
    assert listed["total"] == 0 and listed["memories"] == []

    (in_group,) = await turn(
        chat_server, group_event(uid, gid, "我喜欢篮球"), write("群聊：用户喜欢篮球")
    )
    stored = await rt.store.get(partition(uid), in_group["memory"]["id"])
    assert stored is not None and stored.origin == f"group:{gid}"
    read, listed = await turn(chat_server, group_event(uid, 45002, "我喜欢什么？"), READ, LIST)
    assert contents(read) == {"群聊：用户喜欢篮球"}  # written in a group: shown in any group
    assert listed["total"] == 1

    # In private the user sees everything, wherever it was said.
    read, listed = await turn(chat_server, private_event(uid, "我喜欢什么？"), READ, LIST)
    expected = {"私聊：用户喜欢猫", "群聊：用户喜欢篮球", "旧记忆：用户喜欢老歌"}
    assert contents(read) == expected and listed["total"] == 3

    # The spec's behaviour, when configured.
    private_in_groups.private_memories_in_groups = True
    read, listed = await turn(chat_server, group_event(uid, gid, "我喜欢什么？"), READ, LIST)
    assert contents(read) == expected and listed["total"] == 3


async def test_group_listing_command_answers_privately_with_everything(
    chat_server: ChatServer,
) -> None:
    uid, gid = 4501002, 45003
    await runtime().store.add(partition(uid), "user", "私聊里说的秘密")
    rec = await say(group_event(uid, gid, "/memory user list"))
    assert rec.texts("group") == ["个人记忆已通过私聊发送给你"]
    assert "私聊里说的秘密" in rec.texts("private")[0]  # a private reply may show private memories
