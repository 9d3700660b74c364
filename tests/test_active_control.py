"""Active memory stays under the user's control and within bounds, through real chat turns.

* a forget or ``/memory auto off`` confirmed while an extraction request is in
  flight: its answer writes nothing, a failed batch is never sent again;
* a persona extraction in flight does not re-create a forgotten persona;
* a hung embedding service does not hold a turn (recall's own deadline, then
  its circuit breaker) and recall comes back by itself;
* a full partition: automatic memories give way, explicit ones never do;
* the one-time notice after the first automatic memory.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.active_helpers import active, answer_rule, archived, extractions, live, settle
from tests.chat import BotRecorder, connect_bot
from tests.events import group_event, private_event
from tests.group_helpers import MARKER as PERSONA_MARKER
from tests.group_helpers import block, groups, say, turn_prompts
from tests.group_helpers import settle as settle_groups
from tests.helpers import runtime
from tests.servers import ChatServer, EmbeddingServer, Reply

__all__ = ["active", "groups"]  # the fixtures, imported for pytest

pytestmark = pytest.mark.usefixtures("whole_replies")


async def in_flight(server: ChatServer, count: int = 1, marker: str = "") -> None:
    """Wait until ``count`` extraction requests reached the model (a hang guard of 20 s)."""
    async with asyncio.timeout(20):
        while True:
            seen = extractions(server) if not marker else _marked(server, marker)
            if len(seen) >= count:
                return
            await asyncio.sleep(0.02)


def _marked(server: ChatServer, marker: str) -> list[dict[str, Any]]:
    return [r for r in server.requests if str(r["messages"][0]["content"]).startswith(marker)]


async def forget(uid: int) -> str:
    await say(private_event(uid, "/memory user forget"))
    return (await say(private_event(uid, "/memory user forget confirm"))).texts()[-1]


def _key(uid: int) -> Any:
    from amrita_plugin_memory.active import BatchKey
    from amrita_plugin_memory.storage.keys import user_key

    return BatchKey(str(uid), user_key(uid), "private")


ADD_CAT = {"memories": [{"op": "add", "content": "用户养了一只叫年糕的橘猫"}]}


@pytest.mark.parametrize("how", ["forget", "auto_off"])
async def test_a_forget_or_opt_out_during_an_extraction_writes_nothing(
    chat_server: ChatServer, active: Callable[..., Any], how: str
) -> None:
    service = active(batch_messages=1)
    uid = 5320001 if how == "forget" else 5320002
    chat_server.set_rule(answer_rule(lambda _: ADD_CAT, delay=3))
    await say(private_event(uid, "我养了一只橘猫叫年糕"))
    await in_flight(chat_server)  # the request is at the model now
    if how == "forget":
        assert "删除" in await forget(uid)
    else:
        reply = (await say(private_event(uid, "/memory auto off"))).texts()[-1]
        assert reply.startswith("已关闭主动记忆")
    await service.drain()  # the answer arrives after the user's decision
    assert await live(uid) == {}
    assert service.stats.results[-1].fenced
    if how == "auto_off":
        assert (await say(private_event(uid, "/memory auto on"))).texts()[-1].startswith("已开启")


async def test_a_failed_batch_of_a_forgotten_user_is_never_sent_again(
    chat_server: ChatServer, active: Callable[..., Any], no_retries: None
) -> None:
    service = active(batch_messages=1)
    uid = 5320101
    chat_server.set_rule(
        answer_rule(
            lambda body: (
                Reply(status=500, delay=3)
                if "欠张三" in body["messages"][1]["content"]
                else {"memories": []}
            )
        )
    )
    await say(private_event(uid, "我欠张三五百块钱"))
    await in_flight(chat_server)
    await forget(uid)
    await service.drain()  # the request fails after the forget
    assert service.queue.waiting(_key(uid)) == 0
    await say(private_event(uid, "今天天气不错"))
    await settle(service)
    later = [r["messages"][1]["content"] for r in extractions(chat_server)[1:]]
    assert later and all("欠张三" not in text for text in later)
    assert await live(uid) == {}


async def test_a_persona_extraction_in_flight_does_not_bring_back_a_forgotten_persona(
    chat_server: ChatServer, groups: Callable[..., Any]
) -> None:
    awareness = groups()
    gid, member = 5321900, 5321111

    def rule(body: dict[str, Any]) -> Reply | None:
        if not str(body["messages"][0]["content"]).startswith(PERSONA_MARKER):
            return None
        update = {"user": "用户_1111", "field": "职业/身份", "value": "护士", "confidence": 0.9}
        return Reply(content=json.dumps({"updates": [update]}, ensure_ascii=False), delay=3)

    chat_server.set_rule(rule)
    await say(group_event(member, gid, "我是一名护士，上夜班"))
    await in_flight(chat_server, marker=PERSONA_MARKER)
    await forget(member)
    await settle_groups(awareness)
    assert (await awareness.stores.personas.of_user_anywhere(str(member))).fields == []


async def test_a_hung_embedder_does_not_hold_a_turn_and_recall_comes_back(
    chat_server: ChatServer, embed_server: EmbeddingServer, active: Callable[..., Any]
) -> None:
    from amrita_plugin_memory.infra.breaker import CircuitBreaker
    from amrita_plugin_memory.storage.keys import target_from_ids
    from amrita_plugin_memory.storage.scope import ScopeRules

    service = active(batch_messages=100, recall_min_similarity=0.1, recall_timeout_seconds=1.0)
    service.recaller.breaker = CircuitBreaker(threshold=2, cooldown=1.5, max_cooldown=1.5)
    uid = 5322001
    written = await runtime().tools.write_memory(
        ScopeRules().of_chat(target_from_ids(uid, None)),
        {"content": "用户养了一只橘猫，名字叫年糕", "tags": ["宠物"]},
    )
    assert written["ok"], written
    embed_server.set_mode("hang")
    timings = []
    for _ in range(3):
        chat_server.clear()
        started = time.monotonic()
        recorder = await say(private_event(uid, "我家橘猫年糕最近不爱吃饭"))
        timings.append(time.monotonic() - started)
        assert recorder.texts(), "the turn was answered"
        assert "<MEMORIES>" not in turn_prompts(chat_server)[-1]
    assert max(timings[:2]) < 4.0, timings  # the deadline, not the client's 5 s timeout
    calls = embed_server.embed_calls
    assert timings[2] < 1.0, timings  # the breaker is open: no embedding was even asked
    assert embed_server.embed_calls == calls

    embed_server.set_mode("ok")
    await asyncio.sleep(1.6)  # past the cooldown: the next turn is the trial
    chat_server.clear()
    await say(private_event(uid, "我家橘猫年糕最近不爱吃饭"))
    assert "名字叫年糕" in block(turn_prompts(chat_server)[-1], "MEMORIES")


async def test_a_full_partition_keeps_learning_and_never_locks_out_explicit_writes(
    chat_server: ChatServer, active: Callable[..., Any]
) -> None:
    from amrita_plugin_memory.storage.keys import target_from_ids
    from amrita_plugin_memory.storage.scope import ScopeRules

    service = active(batch_messages=1)
    tools = runtime().tools
    saved = (tools.memory_limit, service.extractor.memory_limit)
    tools.memory_limit = service.extractor.memory_limit = 3
    uid = 5323001
    caller = ScopeRules().of_chat(target_from_ids(uid, None))
    queue: list[dict[str, Any]] = []
    chat_server.set_rule(answer_rule(lambda _: {"memories": [queue.pop(0)]}))

    async def learn(content: str, importance: str) -> None:
        queue.append({"op": "add", "content": content, "importance": importance})
        await say(private_event(uid, content))
        await service.drain()

    try:
        await learn("用户喜欢吃辣", "low")
        await learn("用户在深圳工作", "medium")
        await learn("用户有一个妹妹", "medium")
        # The user's own request: the oldest low-importance automatic memory gives way.
        done = await tools.write_memory(caller, {"content": "用户对青霉素过敏", "tags": ["健康"]})
        assert done["ok"], done
        assert sorted(await live(uid)) == ["用户在深圳工作", "用户对青霉素过敏", "用户有一个妹妹"]
        assert ("用户喜欢吃辣", "displaced") in {
            (a.record.content, a.reason) for a in await archived(uid)
        }
        # A passing remark (low) does not push out a medium one.
        await learn("用户今天喝了奶茶", "low")
        assert "用户今天喝了奶茶" not in await live(uid)
        assert "partition full" in " ".join(service.stats.results[-1].ignored)
        # A medium one takes the place of the oldest medium automatic memory.
        await learn("用户周末喜欢爬山", "medium")
        assert sorted(await live(uid)) == ["用户周末喜欢爬山", "用户对青霉素过敏", "用户有一个妹妹"]
        # Explicit memories are never displaced.
        for text in ("用户的生日是三月三日", "用户住在海珠区"):
            assert (await tools.write_memory(caller, {"content": text, "tags": ["个人"]}))["ok"]
        refused = await tools.write_memory(caller, {"content": "用户会弹吉他", "tags": ["爱好"]})
        assert refused["ok"] is False and "上限" in refused["error"]
        assert sorted(await live(uid)) == [
            "用户住在海珠区",
            "用户对青霉素过敏",
            "用户的生日是三月三日",
        ]
    finally:
        tools.memory_limit, service.extractor.memory_limit = saved


async def test_the_user_is_told_once_in_private(
    chat_server: ChatServer, active: Callable[..., Any]
) -> None:
    service = active(batch_messages=1)
    uid = 5324001
    recorder = BotRecorder()
    connect_bot(recorder)
    chat_server.set_rule(answer_rule(lambda _: ADD_CAT))
    await say(private_event(uid, "我养了一只橘猫叫年糕"), recorder=recorder)
    await service.drain()
    notices = [c for c in recorder.calls if c.api == "send_private_msg"]
    assert len(notices) == 1 and notices[0].data["user_id"] == uid
    text = str(notices[0].data["message"])
    assert "/memory user list" in text and "/memory auto off" in text and "\n" not in text
    await say(private_event(uid, "它今年三岁了"), recorder=recorder)
    await service.drain()
    assert len([c for c in recorder.calls if c.api == "send_private_msg"]) == 1  # once

    # Switched off by the operator: nobody is told.
    service = active(batch_messages=1, notice=False)
    other = 5324002
    await say(private_event(other, "我养了一只橘猫叫年糕"), recorder=recorder)
    await service.drain()
    assert "用户养了一只叫年糕的橘猫" in await live(other)
    assert [c for c in recorder.calls if c.api == "send_private_msg"] == notices


async def test_a_flood_stays_within_every_bound(
    chat_server: ChatServer, active: Callable[..., Any]
) -> None:
    """1,000 answered turns from one user while an extraction runs, then 20 each from 50
    users: requests stay small, in-flight requests capped, what is dropped is counted only."""
    from amrita_plugin_memory.storage.keys import target_from_ids
    from tests.conftest import captured_logs

    service = active(batch_messages=4)
    am = service.settings
    chat_server.set_rule(answer_rule(lambda _: {"memories": []}, delay=1))
    one = target_from_ids(5326001, None)
    before = service.queue.stats.dropped
    with captured_logs("INFO", with_level=False) as lines:
        for i in range(1000):
            await service.answered(one, f"第{i}条刷屏消息：" + "很长" * 300, "好的" * 200)
        await settle(service)
    sizes = [sum(len(m["content"]) for m in r["messages"]) for r in extractions(chat_server)]
    assert sizes and max(sizes) <= am.max_request_chars
    # The first batch, then at most max_pending_turns waiting turns, ≤ 16 a request.
    sent = sum(r["messages"][1]["content"].count("刷屏消息") for r in extractions(chat_server))
    assert sent <= 4 + am.max_pending_turns and len(sizes) <= 10, (sent, len(sizes))
    dropped = service.queue.stats.dropped - before
    assert dropped >= 1000 - 4 - am.max_pending_turns
    assert not any("刷屏" in line for line in lines)  # counts in the log, never the text
    assert any("已丢弃" in line for line in lines)

    chat_server.clear()
    peak_before = service.queue.stats.peak_running
    service.queue.stats.peak_running = 0
    for i in range(20):
        for u in range(50):
            await service.answered(target_from_ids(5326100 + u, None), f"用户{u}的第{i}条", "")
    await settle(service)
    assert service.queue.stats.peak_running == am.max_concurrent_requests
    assert len(extractions(chat_server)) >= 50
    service.queue.stats.peak_running = max(peak_before, service.queue.stats.peak_running)
