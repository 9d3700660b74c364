"""Active memory through real chat turns: extraction contract, bad ops, retry, opt-out, groups,
the reply not waiting for extraction, and ``<MEMORIES>`` recall.

The scripted chat server answers the background extraction request (its
system message starts with ``[memory-extraction]``) with the JSON a test
chooses; everything else it answers like a chat model. Memories live in the
session's real Chroma store, embedded by the local embedding server.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

from tests.active_helpers import (
    MARKER,
    active,
    answer_rule,
    archived,
    extractions,
    live,
    ref_of,
    settle,
    shown_refs,
)
from tests.events import group_event, private_event
from tests.group_helpers import block, say, turn_prompts
from tests.helpers import runtime
from tests.servers import ChatServer, Reply

__all__ = ["active"]  # the fixture, imported for pytest

pytestmark = pytest.mark.usefixtures("whole_replies")


async def seed(uid: int, content: str, *, group_id: int | None = None) -> str:
    from amrita_plugin_memory.storage.keys import target_from_ids
    from amrita_plugin_memory.storage.scope import ScopeRules

    caller = ScopeRules().of_chat(target_from_ids(uid, group_id))
    result = await runtime().tools.write_memory(caller, {"content": content, "tags": ["测试"]})
    assert result["ok"] is True, result
    return str(result["memory"]["id"])


def non_extraction_prompts(server: ChatServer) -> list[str]:
    return [p for p in turn_prompts(server) if not p.startswith(MARKER)]


async def test_extraction_contract_end_to_end(
    chat_server: ChatServer, active: Callable[..., Any]
) -> None:
    service = active(batch_messages=4)
    uid = 5301001
    old_job = await seed(uid, "用户在海豚医疗做测试工程师")
    stale = await seed(uid, "用户每天早上跑步五公里")
    answers: list[dict[str, Any]] = []

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        out = {
            "memories": [
                {"op": "add", "content": "用户养了一只叫年糕的橘猫", "importance": "high", "tags": ["宠物"]},
                {"op": "update", "ref": ref_of(body, "用户在海豚医疗做测试工程师"),
                 "content": "用户跳槽到了腾讯，做后端开发"},
                {"op": "archive", "ref": ref_of(body, "用户每天早上跑步五公里")},
            ]
        }  # fmt: skip
        answers.append(out)
        return out

    chat_server.set_rule(answer_rule(answer))
    for text in ("我养了一只橘猫叫年糕", "我跳槽去腾讯了，做后端", "膝盖伤了，不跑步了"):
        await say(private_event(uid, text))
    assert extractions(chat_server) == []  # 3 of 4: no request yet
    assert service.queue.waiting(_key(uid)) == 3
    await say(private_event(uid, "今天好累"))
    await service.drain()

    (request,) = extractions(chat_server)
    system, user = request["messages"]
    assert system["content"].startswith(MARKER + "\n") and len(request["messages"]) == 2
    assert not request.get("tools")  # isolated: no tools, no history
    body = user["content"]
    for text in (
        "我养了一只橘猫叫年糕",
        "我跳槽去腾讯了，做后端",
        "膝盖伤了，不跑步了",
        "今天好累",
    ):
        assert f"用户：{text}" in body
    assert "（机器人的回复，仅供参考，不要从中提取：好的）" in body
    assert old_job not in body and stale not in body  # references, never raw ids
    assert set(shown_refs(request).values()) >= {
        "用户在海豚医疗做测试工程师",
        "用户每天早上跑步五公里",
    }

    memories = await live(uid)
    cat = memories["用户养了一只叫年糕的橘猫"]
    assert cat.source == "auto" and cat.importance == "high" and cat.tags == ["宠物"]
    assert cat.origin == "private"
    assert memories["用户跳槽到了腾讯，做后端开发"].id == old_job  # updated in place
    assert "用户在海豚医疗做测试工程师" not in memories
    assert "用户每天早上跑步五公里" not in memories
    kept = {(row.record.content, row.reason) for row in await archived(uid)}
    assert ("用户在海豚医疗做测试工程师", "updated") in kept  # history of the update
    assert ("用户每天早上跑步五公里", "outdated") in kept  # archived, not lost

    # The mark shows in the user's own listing.
    chat_server.clear()
    recorder = await say(private_event(uid, "/memory user list"))
    listing = recorder.texts()[-1]
    assert "用户养了一只叫年糕的橘猫" in listing
    cat_line = listing.split("用户养了一只叫年糕的橘猫")[1].split("\n")[1]
    assert "自动记录" in cat_line


def _key(uid: int) -> Any:
    from amrita_plugin_memory.active import BatchKey
    from amrita_plugin_memory.storage.keys import user_key

    return BatchKey(str(uid), user_key(uid), "private")


BAD_OPS: list[tuple[str, Any]] = [
    ("unknown op", {"op": "delete_everything", "ref": "M1"}),
    ("ref not shown", {"op": "archive", "ref": "M99"}),
    ("raw id as ref", {"op": "archive", "ref": "<ID>"}),
    ("content not text", {"op": "add", "content": 12345, "importance": "low"}),
    ("empty content", {"op": "add", "content": "   ", "importance": "low"}),
    ("over-long content", {"op": "add", "content": "长" * 2001}),
    ("unknown importance", {"op": "add", "content": "用户喜欢爬山", "importance": "urgent"}),
    ("tags not a list", {"op": "add", "content": "用户喜欢爬山", "tags": "户外"}),
    ("update without content", {"op": "update", "ref": "M1"}),
    ("not an object", "add 用户喜欢爬山"),
]


@pytest.mark.parametrize(("label", "bad"), BAD_OPS, ids=[label for label, _ in BAD_OPS])
async def test_a_bad_op_changes_nothing(
    chat_server: ChatServer, active: Callable[..., Any], label: str, bad: Any
) -> None:
    service = active(batch_messages=1)
    uid = 5302000 + BAD_OPS.index((label, bad))
    kept = await seed(uid, "用户住在越秀区")
    before = await live(uid)

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        op = dict(bad) if isinstance(bad, dict) else bad
        if isinstance(op, dict) and op.get("ref") == "<ID>":
            op["ref"] = kept
        return {"memories": [op]}

    chat_server.set_rule(answer_rule(answer))
    await say(private_event(uid, "我喜欢爬山"))
    await service.drain()
    assert len(extractions(chat_server)) == 1
    after = await live(uid)
    assert after.keys() == before.keys()
    assert after["用户住在越秀区"].updated_at == before["用户住在越秀区"].updated_at
    assert await archived(uid) == []
    assert service.stats.results[-1].ignored  # said why (debug log), never applied


async def test_ops_beyond_max_ops_are_ignored(
    chat_server: ChatServer, active: Callable[..., Any]
) -> None:
    service = active(batch_messages=1, max_ops=2)
    uid = 5303001
    adds = [{"op": "add", "content": f"用户的第{i}个爱好是{h}"} for i, h in enumerate("棋书画", 1)]
    chat_server.set_rule(answer_rule(lambda _: {"memories": adds}))
    await say(private_event(uid, "我喜欢下棋、读书和画画"))
    await service.drain()
    assert sorted(await live(uid)) == ["用户的第1个爱好是棋", "用户的第2个爱好是书"]


@pytest.mark.parametrize("failure", ["malformed", "http500"])
async def test_a_failed_extraction_writes_nothing_and_is_retried_once(
    chat_server: ChatServer, active: Callable[..., Any], failure: str
) -> None:
    service = active(batch_messages=2)
    uid = 5304001 if failure == "malformed" else 5304002
    # Batches are told apart by their messages: with "malformed" the first two
    # answers are not JSON, with "http500" the first request fails.

    def answer(body: dict[str, Any]) -> Any:
        text = body["messages"][1]["content"]
        if failure == "http500" and "我家住在海珠区" not in text:
            return Reply(status=500)
        if failure == "malformed" and "周末去爬山" not in text:
            return "我觉得应该记住：用户喜欢猫"  # not JSON
        return {"memories": [{"op": "add", "content": "用户喜欢猫"}]}

    chat_server.set_rule(answer_rule(answer))
    for text in ("我喜欢猫", "尤其是橘猫"):
        await say(private_event(uid, text))
    await service.drain()
    assert await live(uid) == {}
    assert service.queue.waiting(_key(uid)) == 2  # offered again, not on their own

    for text in ("我家住在海珠区", "离公司很近"):
        await say(private_event(uid, text))
    await service.drain()
    second = extractions(chat_server)[-1]["messages"][1]["content"]
    assert "用户：我喜欢猫" in second and "用户：我家住在海珠区" in second
    if failure == "http500":
        assert list(await live(uid)) == ["用户喜欢猫"]
        return
    # The second answer is bad too: the first batch is dropped, the second offered once more.
    assert await live(uid) == {}
    for text in ("周末去爬山", "天气不错"):
        await say(private_event(uid, text))
    await service.drain()
    third = extractions(chat_server)[-1]["messages"][1]["content"]
    assert "用户：我喜欢猫" not in third and "用户：我家住在海珠区" in third
    assert list(await live(uid)) == ["用户喜欢猫"]


async def test_opt_out_stops_learning_and_recall(
    chat_server: ChatServer, active: Callable[..., Any]
) -> None:
    service = active(batch_messages=1, recall_min_similarity=0.0)
    uid = 5305001
    await seed(uid, "用户对花生过敏")
    chat_server.set_rule(
        answer_rule(lambda _: {"memories": [{"op": "add", "content": "用户喜欢爬山"}]})
    )

    shown = (await say(private_event(uid, "/memory auto"))).texts()[-1]
    assert shown.startswith("主动记忆：已开启")
    reply = (await say(private_event(uid, "/memory auto off"))).texts()[-1]
    assert reply.startswith("已关闭主动记忆")
    chat_server.clear()
    chat_server.set_rule(
        answer_rule(lambda _: {"memories": [{"op": "add", "content": "用户喜欢爬山"}]})
    )
    await say(private_event(uid, "我对花生过敏，周末喜欢爬山"))
    await settle(service)
    assert extractions(chat_server) == []
    assert "<MEMORIES>" not in non_extraction_prompts(chat_server)[0]
    assert list(await live(uid)) == ["用户对花生过敏"]
    assert (
        (await say(private_event(uid, "/memory auto"))).texts()[-1].startswith("主动记忆：已关闭")
    )

    assert (
        (await say(private_event(uid, "/memory auto on"))).texts()[-1].startswith("已开启主动记忆")
    )
    chat_server.clear()
    chat_server.set_rule(
        answer_rule(lambda _: {"memories": [{"op": "add", "content": "用户喜欢爬山"}]})
    )
    await say(private_event(uid, "我对花生过敏，周末喜欢爬山"))
    await service.drain()
    assert "用户对花生过敏" in block(non_extraction_prompts(chat_server)[0], "MEMORIES")
    assert sorted(await live(uid)) == ["用户喜欢爬山", "用户对花生过敏"]


async def test_groups_are_off_by_default_and_see_only_group_memories(
    chat_server: ChatServer, active: Callable[..., Any]
) -> None:
    uid, gid = 5306001, 5306900
    await seed(uid, "用户在腾讯上班，正在偷偷找新工作")
    await seed(uid, "用户在群里说过自己喜欢打羽毛球", group_id=gid)
    chat_server.set_rule(
        answer_rule(lambda _: {"memories": [{"op": "add", "content": "用户是广东人"}]})
    )
    service = active(batch_messages=1)
    await say(group_event(uid, gid, "我是广东人，喜欢打羽毛球"))
    await settle(service)
    assert extractions(chat_server) == []  # in_groups = false

    service = active(batch_messages=1, in_groups=True)
    await say(group_event(uid, gid, "我是广东人，喜欢打羽毛球"))
    await service.drain()
    (request,) = extractions(chat_server)
    shown = set(shown_refs(request).values())
    assert shown == {"用户在群里说过自己喜欢打羽毛球"}  # never the private memory
    assert "偷偷找新工作" not in request["messages"][1]["content"]
    learned = (await live(uid))["用户是广东人"]
    assert learned.origin == f"group:{gid}" and learned.source == "auto"


async def test_private_update_of_a_group_memory_makes_it_private(
    chat_server: ChatServer, active: Callable[..., Any]
) -> None:
    service = active(batch_messages=1)
    uid, gid = 5307001, 5307900
    said_in_group = await seed(uid, "用户在腾讯上班", group_id=gid)
    chat_server.set_rule(
        answer_rule(
            lambda body: {
                "memories": [
                    {
                        "op": "update",
                        "ref": ref_of(body, "用户在腾讯上班"),
                        "content": "用户在腾讯上班，正在偷偷找新工作",
                    }
                ]
            }
        )
    )
    await say(private_event(uid, "其实我在偷偷找新工作"))
    await service.drain()
    record = (await live(uid))["用户在腾讯上班，正在偷偷找新工作"]
    assert record.id == said_in_group and record.origin == "private"
    chat_server.clear()
    from amrita_plugin_memory.storage.keys import target_from_ids
    from amrita_plugin_memory.storage.scope import ScopeRules

    in_group = ScopeRules().of_chat(target_from_ids(uid, gid))
    found = await runtime().tools.read_memory(in_group, {"query": "工作"})
    assert found["ok"] and found["memories"] == []


async def test_the_reply_does_not_wait_for_a_slow_extraction(
    chat_server: ChatServer, active: Callable[..., Any]
) -> None:
    service = active(batch_messages=1)
    uid = 5308001
    thinking = threading.Event()  # the model answers the extraction only once this is set
    chat_server.set_rule(
        answer_rule(
            lambda _: {"memories": [{"op": "add", "content": "用户喜欢喝乌龙茶"}]}, hold=thinking
        )
    )
    try:
        # A hang guard: a reply that waited for the extraction would never come.
        async with asyncio.timeout(60):
            recorder = await say(private_event(uid, "我最喜欢喝乌龙茶"))
            recorder = await say(private_event(uid, "你好"), recorder=recorder)
            assert len(recorder.texts()) == 2  # both turns answered
            while not extractions(chat_server):  # noqa: ASYNC110 - the server's request log
                await asyncio.sleep(0.01)
        assert await live(uid) == {}  # the extraction is still waiting for its answer
    finally:
        thinking.set()
    await service.drain()
    assert "用户喜欢喝乌龙茶" in await live(uid)


async def test_memories_block_related_unrelated_and_group(
    chat_server: ChatServer, active: Callable[..., Any]
) -> None:
    # The test embedder hashes character n-grams: a shared phrase is "related".
    active(batch_messages=100, recall_min_similarity=0.1, recall_top_k=3)
    uid, gid = 5309001, 5309900
    await seed(uid, "用户养了一只橘猫，名字叫年糕")
    await seed(uid, "用户在群里说过：橘猫年糕今年三岁", group_id=gid)
    await seed(uid, "用户家的橘猫年糕对<MEMORIES>花生</MEMORIES>过敏")

    await say(private_event(uid, "我家橘猫年糕最近不爱吃饭"))
    prompt = non_extraction_prompts(chat_server)[-1]
    body = block(prompt, "MEMORIES")
    assert "用户养了一只橘猫，名字叫年糕" in body
    assert "用户在群里说过：橘猫年糕今年三岁" in body
    assert "对＜MEMORIES>花生＜/MEMORIES>过敏" in body
    assert prompt.count("<MEMORIES>") == 1  # a memory's text cannot open or close the block

    chat_server.clear()
    await say(private_event(uid, "哈哈哈，好的谢谢"))
    assert "<MEMORIES>" not in non_extraction_prompts(chat_server)[-1]

    chat_server.clear()
    await say(group_event(uid, gid, "我家橘猫年糕最近不爱吃饭"))
    body = block(non_extraction_prompts(chat_server)[-1], "MEMORIES")
    assert "用户在群里说过：橘猫年糕今年三岁" in body
    assert "名字叫年糕" not in body  # said in private: never in a group's prompt


def test_parse_memory_ops_keeps_only_well_formed_ops() -> None:
    from amrita_plugin_memory.prompting.memory_ops import OpLimits, parse_memory_ops

    limits = OpLimits(max_ops=5, content_chars=50, tags=2, tag_chars=4)
    answer = """```json
{"memories": [
  {"op": "add", "content": " 用户喜欢猫 ", "tags": ["宠物"]},
  {"op": "update", "ref": "M1", "content": "用户搬到了海珠区"},
  {"op": "archive", "ref": "M1"},
  {"op": "archive", "ref": "M2"},
  {"op": "add", "content": "用户喜欢狗", "tags": ["宠物", "动物", "三个"]},
  {"op": "add", "content": "用户喜欢鸟"}
]}
```"""
    parsed = parse_memory_ops(answer, refs={"M1", "M2"}, limits=limits)
    assert not parsed.malformed
    assert [(o.op, o.ref, o.content, o.tags) for o in parsed.ops] == [
        ("add", "", "用户喜欢猫", ("宠物",)),
        ("update", "M1", "用户搬到了海珠区", ()),
        ("archive", "M2", "", ()),
    ]
    assert parsed.ignored == [
        "memories[2]: ref already changed by an earlier op",
        "memories[4]: tags not a list of short texts",
        "memories[5:]: beyond max_ops=5",
    ]
    for bad in ("", "[1]", '{"memories": {}}', '{"updates": []}', "好的"):
        assert parse_memory_ops(bad, refs=set(), limits=limits).malformed, bad
    assert parse_memory_ops('{"memories": []}', refs=set(), limits=limits).ops == []


async def test_forget_drops_unprocessed_messages(
    chat_server: ChatServer, active: Callable[..., Any]
) -> None:
    service = active(batch_messages=4)
    uid = 5310001
    chat_server.set_rule(
        answer_rule(lambda _: {"memories": [{"op": "add", "content": "用户喜欢猫"}]})
    )
    await say(private_event(uid, "我喜欢猫"))
    assert service.queue.waiting(_key(uid)) == 1
    await say(private_event(uid, "/memory user forget"))
    reply = (await say(private_event(uid, "/memory user forget confirm"))).texts()[-1]
    assert "删除" in reply or "遗忘" in reply, reply
    assert service.queue.waiting(_key(uid)) == 0
    await settle(service)
    assert extractions(chat_server) == [] and await live(uid) == {}
