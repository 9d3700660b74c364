"""Member personas through real group turns: learning, confidence, rate limit, opt-out, restart.

The scripted chat server answers the background extraction request (its
system message starts with ``[persona-extraction]``) with the JSON a test
chooses; everything else it answers like a chat model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import captured_logs
from tests.events import group_event, private_event
from tests.group_helpers import (
    MARKER,
    block,
    extraction_rule,
    group_view,
    groups,
    is_extraction,
    say,
    settle,
    turn_prompts,
)
from tests.helpers import user_view
from tests.reliability_stats import STATS
from tests.servers import ChatServer

__all__ = ["groups"]  # the fixture, imported for pytest

pytestmark = pytest.mark.usefixtures("whole_replies")


def upd(label: str, field: str, value: str, confidence: float) -> dict[str, Any]:
    return {"user": label, "field": field, "value": value, "confidence": confidence}


def extractions(server: ChatServer) -> list[dict[str, Any]]:
    return [r for r in server.requests if is_extraction(r)]


async def test_persona_learned_in_one_group_shows_in_another(
    chat_server: ChatServer, groups: Callable[..., Any]
) -> None:
    awareness = groups()
    group_a, group_b, member, stranger = 43001, 43002, 4301111, 4302222
    chat_server.set_rule(
        extraction_rule(
            lambda _: {
                "updates": [
                    upd("用户_1111", "职业/身份", "软件工程师", 0.9),
                    upd("用户_1111", "家乡", "杭州", 0.65),  # exactly the threshold: kept
                    upd("用户_1111", "兴趣", "咖啡", 0.3),  # below update_min_confidence
                    upd("用户_2222", "兴趣", "围棋", 0.99),  # did not speak here
                ]
            }
        )
    )
    await say(group_event(member, group_a, "我是一名软件工程师，老家杭州，偶尔喝咖啡"))
    await settle(awareness)

    (request,) = extractions(chat_server)
    assert request["messages"][0]["content"].startswith(MARKER + "\n")
    assert len(request["messages"]) == 2 and not request.get("tools")  # isolated
    analysed = request["messages"][1]["content"]
    assert "需要分析的成员：用户_1111" in analysed
    assert "用户_1111: 我是一名软件工程师" in analysed
    assert f"user{member}" not in analysed and str(member) not in analysed
    persona = await awareness.stores.personas.of_user_anywhere(str(member))
    assert [(f.field, f.value) for f in persona.fields] == [
        ("职业/身份", "软件工程师"),
        ("家乡", "杭州"),
    ]
    assert (await awareness.stores.personas.of_user_anywhere(str(stranger))).fields == []

    chat_server.clear()
    await say(group_event(member, group_b, "你还记得我是做什么的吗"))
    personas = block(turn_prompts(chat_server)[0], "PERSONAS")
    assert personas.splitlines()[1:] == ["用户_1111：", "- 职业/身份：软件工程师", "- 家乡：杭州"]

    chat_server.clear()
    await say(private_event(member, "私聊里不带群画像"))
    assert "<PERSONAS>" not in turn_prompts(chat_server)[0]


async def test_rate_limit_is_per_group_and_member(
    chat_server: ChatServer, groups: Callable[..., Any]
) -> None:
    awareness = groups(persona={"max_users_per_turn": 2})
    clock = awareness.clock
    group_a, group_b, group_c, member = 43011, 43012, 43013, 4303333
    chat_server.set_rule(extraction_rule(lambda _: {"updates": []}))

    async def turn(gid: int, text: str) -> list[str]:
        before = len(awareness.extractor.results)
        await say(group_event(member, gid, text))
        await settle(awareness)
        new = awareness.extractor.results[before:]
        return new[0].analysed if new else []

    assert await turn(group_a, "第一次") == [str(member)]
    clock.now += 10
    assert await turn(group_a, "十秒后，同一个群") == []
    assert await turn(group_b, "十秒后，另一个群") == [str(member)]
    clock.now += 21
    assert await turn(group_a, "三十一秒后") == [str(member)]
    assert len(extractions(chat_server)) == 3  # the rate-limited turn sent no request

    # Speaker first, then the most recent speakers, at most max_users_per_turn.
    for uid in (4304441, 4304442, 4304443):
        await say(group_event(uid, group_c, f"我是 {uid}", to_me=False))
    assert await turn(group_c, "大家好") == [str(member), "4304443"]


async def test_opt_out_is_honoured(chat_server: ChatServer, groups: Callable[..., Any]) -> None:
    awareness = groups()
    clock = awareness.clock
    gid, member, other = 43021, 4305551, 4305552
    chat_server.set_rule(
        extraction_rule(
            lambda _: {
                "updates": [
                    upd("用户_5551", "兴趣", "摄影", 0.95),
                    upd("用户_5552", "兴趣", "钓鱼", 0.95),
                ]
            }
        )
    )
    rec = await say(private_event(member, "/memory persona off"))
    assert "已停止学习你的画像" in rec.texts("private")[0]
    await say(group_event(other, gid, "我周末去钓鱼", to_me=False))
    await say(group_event(member, gid, "我喜欢摄影"))
    await settle(awareness)
    assert awareness.extractor.results[-1].analysed == [str(other)]
    assert (await awareness.stores.personas.of_user_anywhere(str(member))).fields == []
    assert [
        f.value for f in (await awareness.stores.personas.of_user_anywhere(str(other))).fields
    ] == ["钓鱼"]

    rec = await say(group_event(member, gid, "/memory persona"))
    assert rec.texts("group") == ["画像已通过私聊发送给你"]
    assert rec.texts("private") == ["你还没有画像（已停止学习：/memory persona on 恢复）"]

    await say(private_event(member, "/memory persona on"))
    clock.now += 31
    await say(group_event(member, gid, "我还是喜欢摄影"))
    await settle(awareness)
    rec = await say(private_event(member, "/memory persona"))
    assert rec.texts("private") == ["你的画像：\n- 兴趣：摄影"]
    rec = await say(private_event(member, "/memory persona clear"))
    assert rec.texts("private") == ["已删除你的画像"]
    assert (await awareness.stores.personas.of_user_anywhere(str(member))).fields == []


async def test_usage_is_counted_and_bad_answers_change_nothing(
    chat_server: ChatServer, groups: Callable[..., Any], no_retries: None
) -> None:
    from nonebot_plugin_amrita.database import InsightsModel

    awareness = groups()
    gid, member = "43031", "4306661"
    awareness.observe(gid, member, "nick", "我是一名医生")
    chat_server.set_rule(
        extraction_rule(lambda _: {"updates": [upd("用户_6661", "职业/身份", "医生", 0.9)]})
    )
    before = await InsightsModel.get()
    tokens = (before.token_input, before.token_output)
    result = await awareness.extractor.run(group_view(gid), user_view(member))
    assert result.updated == [member]
    after = await InsightsModel.get()
    assert (after.token_input - tokens[0], after.token_output - tokens[1]) == (11, 7)

    hostile = ["不是 JSON", '{"updates": "全部"}', '{"updates": [{"user": "用户_6661"}]}']
    for answer in hostile:
        chat_server.set_rule(_raw_rule(answer))
        awareness.clock.now += 31
        with captured_logs("DEBUG") as lines:
            result = await awareness.extractor.run(group_view(gid), user_view(member))
        assert result.analysed == [member] and result.updated == [] and result.ignored
        assert any("DEBUG" in line and "画像提取" in line and "忽略" in line for line in lines)
        assert not any("医生" in line for line in lines if not line.startswith("DEBUG"))
        STATS.inputs_tried += 1
    fields = (await awareness.stores.personas.of_user_anywhere(member)).fields
    assert [(f.field, f.value) for f in fields] == [("职业/身份", "医生")]

    chat_server.set_mode("error500")
    awareness.clock.now += 31
    with captured_logs("WARNING") as lines:
        result = await awareness.extractor.run(group_view(gid), user_view(member))
    STATS.faults_injected += 1
    assert result.error and any("画像提取请求失败" in line for line in lines)
    assert [f.value for f in (await awareness.stores.personas.of_user_anywhere(member)).fields] == [
        "医生"
    ]


def _raw_rule(answer: str) -> Callable[[dict[str, Any]], Any]:
    from tests.servers import Reply

    def rule(body: dict[str, Any]) -> Any:
        return Reply.text(answer) if is_extraction(body) else None

    return rule


@pytest.mark.usefixtures("chat_server")
async def test_restart_keeps_windows_personas_and_self_memory(groups: Callable[..., Any]) -> None:
    from amrita_plugin_memory.groups.service import GroupAwareness

    awareness = groups(group_context={"context_persist_every": 3})
    gid, member = 43041, 4307771
    for i in range(4):
        await say(group_event(member, gid, f"第{i}条消息", to_me=False))
    await settle(awareness)
    await awareness.stores.personas.merge(str(member), [("兴趣", "登山")], now=1.0, max_chars=700)
    added = await awareness.stores.self_memory.add("重启测试：我是一只猫")
    try:
        assert added.ok
        restarted = GroupAwareness.build(awareness.config)  # new objects, same SQLite
        kept = await restarted.stores.windows.recent_any(str(gid), 10)
        assert [e.text for e in kept] == ["第0条消息", "第1条消息", "第2条消息"]  # 4th not flushed
        assert [
            f.value for f in (await restarted.stores.personas.of_user_anywhere(str(member))).fields
        ] == ["登山"]
        assert "重启测试：我是一只猫" in await restarted.self_block()

        await awareness.stores.windows.close()  # driver shutdown flushes the rest
        again = GroupAwareness.build(awareness.config)
        assert len(await again.stores.windows.recent_any(str(gid), 10)) == 4

        # Lowered limits cut what is stored, at the next start.
        smaller = awareness.config.model_copy(
            update={
                "group_context": awareness.config.group_context.model_copy(
                    update={"context_message_count": 2, "context_max_text_chars": 3}
                )
            }
        )
        compacted = GroupAwareness.build(smaller)
        await compacted.start()
        fresh = GroupAwareness.build(smaller)
        assert [e.text for e in await fresh.stores.windows.recent_any(str(gid), 10)] == [
            "第2…",
            "第3…",
        ]
    finally:
        entries = await awareness.stores.self_memory.list()
        for number in range(len(entries), 0, -1):
            if entries[number - 1].content.startswith("重启测试"):
                await awareness.stores.self_memory.delete(number)
