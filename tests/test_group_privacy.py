"""What is said in a chat stays with its audience: L2 memory origins through real chat turns.

A memory records where it was written (``origin``: ``private`` or
``group:<gid>``). A member's memory from group A is shown in group A and in
their private chat, never in group B; one from a private chat only in private
(memories from before origins count as private). The rule is
``core/records.GroupPrivacy`` and holds for every path: ``read_memory`` /
``list_memory`` / ``update_memory`` with ``scope=user``, ``/memory`` commands, and
active memory's ``<MEMORIES>`` recall and extraction references.
``group_memories_across_groups = true`` lets any group read what was said in
any group; ``private_memories_in_groups = true`` lets a group read everything.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.active_helpers import active, answer_rule, extractions, settle, shown_refs
from tests.chat import tool_results
from tests.events import group_event, private_event
from tests.group_helpers import block, say, turn_prompts
from tests.helpers import new_memory, partition, runtime, view_of
from tests.lazy import lazy_import
from tests.servers import ChatServer, Reply

__all__ = ["active"]  # the fixture, imported for pytest

pytestmark = pytest.mark.usefixtures("whole_replies")

R = lazy_import("amrita_plugin_memory.core.records")


@pytest.fixture
def privacy() -> Iterator[Callable[..., None]]:
    """Set the rule of the chat's scopes (the two switches as keywords); restored afterwards."""
    rt = runtime()
    saved = rt.scopes

    def configure(**switches: bool) -> None:
        rt.scopes = dataclasses.replace(saved, privacy=R.GroupPrivacy(**switches))

    yield configure
    rt.scopes = saved


async def turn(server: ChatServer, event: Any, *replies: Reply) -> list[dict[str, Any]]:
    server.clear()
    server.script(*replies)
    await say(event)
    return tool_results(server)


def write(content: str) -> Reply:
    args = {"content": content, "tags": ["测试"], "importance": "medium", "scope": "user"}
    return Reply.tool_call("write_memory", args)


READ = Reply.tool_call("read_memory", {"query": "喜欢", "top_k": 10, "scope": "user"})
LIST = Reply.tool_call("list_memory", {"limit": 20, "offset": 0, "scope": "user"})


def contents(result: dict[str, Any]) -> set[str]:
    return {m["content"] for m in result["memories"]}


def test_one_rule_for_every_combination() -> None:
    """``GroupPrivacy.origins_for``: chat × switches → which origins are shown."""
    chats = {"private": "private", "A": "group:1", "B": "group:2"}
    memories = {"private": "private", "A": "group:1", "B": "group:2"}
    # (private_memories_in_groups, group_memories_across_groups) → chat → memories shown
    table = {
        (False, False): {"private": "private A B", "A": "A", "B": "B"},
        (False, True): {"private": "private A B", "A": "A B", "B": "A B"},
        (True, False): {"private": "private A B", "A": "private A B", "B": "private A B"},
        (True, True): {"private": "private A B", "A": "private A B", "B": "private A B"},
    }
    for (private_in_groups, across), expected in table.items():
        rule = R.GroupPrivacy(
            private_memories_in_groups=private_in_groups,
            group_memories_across_groups=across,
        )
        for chat, chat_origin in chats.items():
            origins = rule.origins_for(chat_origin)
            shown = {name for name, origin in memories.items() if origins.allows(origin)}
            assert shown == set(expected[chat].split()), (private_in_groups, across, chat)
            # The stored form agrees (no ``origin`` at all: a memory from before origins).
            assert origins.allows_meta({}) == ("private" in shown)
            assert origins.allows_meta({"origin": "group:1"}) == ("A" in shown)
    rule = R.GroupPrivacy()
    assert rule.origins_for("group:1").where() == {"origin": "group:1"}
    assert R.GroupPrivacy(group_memories_across_groups=True).origins_for("group:1").where() == {
        R.ORIGIN_GROUP_FLAG: True
    }
    assert rule.origins_for("private").where() is None
    assert R.where_partition("p", origins=rule.origins_for("group:1")) == {
        "$and": [{"user_id": "p"}, {"origin": "group:1"}]
    }
    with pytest.raises(ValueError):
        R.OriginFilter.only("private")  # rows from before origins have no key to match


def test_config_key_defaults_to_the_narrow_rule() -> None:
    from amrita_plugin_memory.core.config import ConfigFile

    assert R.GroupPrivacy.from_config(ConfigFile()) == R.GroupPrivacy()
    both = ConfigFile(private_memories_in_groups=True, group_memories_across_groups=True)
    assert R.GroupPrivacy.from_config(both) == R.GroupPrivacy(True, True)


async def test_a_memory_stays_with_the_chat_it_was_said_in(
    chat_server: ChatServer, privacy: Callable[..., None]
) -> None:
    uid, group_a, group_b = 4501001, 45001, 45002
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
    stored = await rt.store.get(view_of(partition(uid)), written["memory"]["id"])
    assert stored is not None and stored.origin == "private"

    read, listed = await turn(chat_server, group_event(uid, group_a, "我喜欢什么？"), READ, LIST)
    assert read["ok"] and read["memories"] == []
    assert listed["total"] == 0 and listed["memories"] == []

    (in_a,) = await turn(
        chat_server, group_event(uid, group_a, "我喜欢篮球"), write("群聊：用户喜欢篮球")
    )
    said_in_a = in_a["memory"]["id"]
    stored = await rt.store.get(view_of(partition(uid)), said_in_a)
    assert stored is not None and stored.origin == f"group:{group_a}"
    read, listed = await turn(chat_server, group_event(uid, group_a, "我喜欢什么？"), READ, LIST)
    assert contents(read) == {"群聊：用户喜欢篮球"} and listed["total"] == 1

    # Another group is another audience: nothing said in A, by any read.
    read, listed = await turn(chat_server, group_event(uid, group_b, "我喜欢什么？"), READ, LIST)
    assert read["ok"] and read["memories"] == []
    assert listed["total"] == 0 and listed["memories"] == []
    # Nor by id: update_memory answers with the memory's text, so there it is missing.
    change = {"id": said_in_a, "importance": "high", "scope": "user"}
    (updated,) = await turn(
        chat_server,
        group_event(uid, group_b, "那条改成重要"),
        Reply.tool_call("update_memory", change),
    )
    assert not updated["ok"] and "不存在" in updated["error"]
    assert "篮球" not in json.dumps(updated, ensure_ascii=False)
    unchanged = await rt.store.get(view_of(partition(uid)), said_in_a)
    assert unchanged is not None and unchanged.importance == "medium"
    (updated,) = await turn(
        chat_server,
        group_event(uid, group_a, "那条改成重要"),
        Reply.tool_call("update_memory", change),
    )
    assert updated["ok"] and updated["memory"]["importance"] == "high"

    # In private the user sees everything, wherever it was said.
    read, listed = await turn(chat_server, private_event(uid, "我喜欢什么？"), READ, LIST)
    expected = {"私聊：用户喜欢猫", "群聊：用户喜欢篮球", "旧记忆：用户喜欢老歌"}
    assert contents(read) == expected and listed["total"] == 3

    # The wider rule, when configured: any group reads what was said in any group.
    privacy(group_memories_across_groups=True)
    read, listed = await turn(chat_server, group_event(uid, group_b, "我喜欢什么？"), READ, LIST)
    assert contents(read) == {"群聊：用户喜欢篮球"} and listed["total"] == 1

    # The spec's behaviour: everything everywhere (whatever the other switch says).
    for across in (False, True):
        privacy(private_memories_in_groups=True, group_memories_across_groups=across)
        read, listed = await turn(
            chat_server, group_event(uid, group_b, "我喜欢什么？"), READ, LIST
        )
        assert contents(read) == expected and listed["total"] == 3


async def test_a_rewrite_from_a_private_chat_leaves_the_group(chat_server: ChatServer) -> None:
    """``update_memory`` applies active memory's origin rule (``origin_after_rewrite``): a
    memory written in a group and rewritten in a private chat (or by the L3 loop, whose
    scope is the target's private chat) is private from then on, so the private text is
    never listed or recalled in that group. A change of tags or importance alone keeps it
    where it was."""
    from amrita_plugin_memory.storage.keys import target_from_ids
    from amrita_plugin_memory.storage.scope import Scope

    uid, group_a = 4501011, 45011
    rt = runtime()
    (in_a,) = await turn(
        chat_server, group_event(uid, group_a, "我喜欢篮球"), write("群聊：用户喜欢篮球")
    )
    said_in_a = in_a["memory"]["id"]
    (tagged,) = await turn(
        chat_server,
        private_event(uid, "那条改成重要"),
        Reply.tool_call("update_memory", {"id": said_in_a, "importance": "high", "scope": "user"}),
    )
    assert tagged["ok"]
    kept = await rt.store.get(view_of(partition(uid)), said_in_a)
    assert kept is not None and kept.origin == f"group:{group_a}"  # no new text: stays

    secret = "私聊：用户喜欢篮球，膝盖做过手术"
    rewrite = {"id": said_in_a, "content": secret, "scope": "user"}
    (updated,) = await turn(
        chat_server, private_event(uid, "更新一下"), Reply.tool_call("update_memory", rewrite)
    )
    assert updated["ok"] and updated["memory"]["content"] == secret
    stored = await rt.store.get(view_of(partition(uid)), said_in_a)
    assert stored is not None and stored.origin == "private"
    read, listed = await turn(chat_server, group_event(uid, group_a, "我喜欢什么？"), READ, LIST)
    assert read["ok"] and read["memories"] == [] and listed["total"] == 0
    assert "膝盖" not in json.dumps([read, listed], ensure_ascii=False)

    # The L3 loop's update tool goes through the same logic with the loop's scope.
    (again,) = await turn(
        chat_server, group_event(uid, group_a, "我喜欢足球"), write("群聊：用户喜欢足球")
    )
    loop_scope = Scope.of_loop(target_from_ids(str(uid)))
    args = {"id": again["memory"]["id"], "content": "L3：用户喜欢足球，也在吃降压药"}
    result = await rt.tools.update_memory(loop_scope, {**args, "scope": "user"})
    assert result["ok"]
    moved = await rt.store.get(view_of(partition(uid)), again["memory"]["id"])
    assert moved is not None and moved.origin == "private"
    read, listed = await turn(chat_server, group_event(uid, group_a, "我喜欢什么？"), READ, LIST)
    assert read["memories"] == [] and listed["total"] == 0


async def test_memory_commands_in_another_group_answer_privately(chat_server: ChatServer) -> None:
    uid, group_a, group_b = 4501003, 45004, 45005
    from amrita_plugin_memory.storage.keys import target_from_ids
    from amrita_plugin_memory.storage.scope import ScopeRules

    tools = runtime().tools
    in_a = ScopeRules().of_chat(target_from_ids(uid, group_a))
    written = await tools.write_memory(in_a, {"content": "群A里说的：用户在备考", "tags": ["x"]})
    assert written["ok"]
    for command in ("/memory user list", "/memory user search 备考", "/memory list"):
        rec = await say(group_event(uid, group_b, command))
        assert all("备考" not in text for text in rec.texts("group")), command
        assert "群A里说的：用户在备考" in rec.texts("private")[0], command  # their private chat


def said(server: ChatServer) -> str:
    """The ``<MEMORIES>`` block of the last chat turn's prompt."""
    prompts = [p for p in turn_prompts(server) if not p.startswith("[memory-extraction]")]
    return block(prompts[-1], "MEMORIES")


async def test_active_memory_keeps_what_was_learned_in_a_group_to_that_group(
    chat_server: ChatServer, active: Callable[..., Any], privacy: Callable[..., None]
) -> None:
    # The test embedder hashes character n-grams: a shared phrase is "related".
    uid, group_a, group_b = 4501004, 45006, 45007
    learned = "用户在群里说：橘猫年糕今年三岁"
    service = active(batch_messages=1, in_groups=True, recall_min_similarity=0.1, recall_top_k=5)
    chat_server.set_rule(answer_rule(lambda _: {"memories": [{"op": "add", "content": learned}]}))
    await say(group_event(uid, group_a, "我家橘猫年糕今年三岁了"))
    await service.drain()
    (memory,) = await runtime().store.list(view_of(partition(uid)))
    assert memory.content == learned and memory.origin == f"group:{group_a}"

    def chat_in(group_id: int | None) -> Any:
        text = "我家橘猫年糕最近不爱吃饭"
        return private_event(uid, text) if group_id is None else group_event(uid, group_id, text)

    async def seen_in(group_id: int | None) -> tuple[str, set[str], set[str]]:
        """``<MEMORIES>`` of a turn there, the refs of its extraction, what read_memory found."""
        chat_server.clear()
        chat_server.set_rule(answer_rule(lambda _: {"memories": []}))
        chat_server.script(Reply.tool_call("read_memory", {"query": "橘猫年糕", "scope": "user"}))
        await say(chat_in(group_id))
        await settle(service)
        (request,) = extractions(chat_server)
        found = contents(tool_results(chat_server)[0])
        return said(chat_server), set(shown_refs(request).values()), found

    memories, refs, found = await seen_in(group_b)
    assert learned not in memories and learned not in refs and learned not in found
    for group_id in (group_a, None):  # the group it was said in, and the member's private chat
        memories, refs, found = await seen_in(group_id)
        assert learned in memories and learned in refs and learned in found, group_id

    # The wider rule, when configured, for recall and extraction as for the tools.
    privacy(group_memories_across_groups=True)
    service.configure(service.config.model_copy(update={"group_memories_across_groups": True}))
    memories, refs, found = await seen_in(group_b)
    assert learned in memories and learned in refs and learned in found


async def test_group_listing_command_answers_privately_with_everything(
    chat_server: ChatServer,
) -> None:
    uid, gid = 4501002, 45003
    await runtime().store.add(new_memory(partition(uid), "user", "私聊里说的秘密"))
    rec = await say(group_event(uid, gid, "/memory user list"))
    assert rec.texts("group") == ["个人记忆已通过私聊发送给你"]
    assert "私聊里说的秘密" in rec.texts("private")[0]  # a private reply may show private memories
