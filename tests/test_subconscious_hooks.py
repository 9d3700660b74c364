"""L3 loop wiring: backoff scheduling, setup, chat hooks, pending messages, sending.

Chat turns go through NoneBot + OneBot V11 + Amrita with the scripted LLM
server, like the L1/L2 tests.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.chat import BotRecorder, make_bot, run_turn
from tests.conftest import captured_logs
from tests.events import group_event, private_event
from tests.helpers import (
    chat_requests,
    new_memory,
    partition,
    runtime,
    runtime_with,
    seen_by_model,
    system_prompt,
    turn_message,
)
from tests.servers import ChatServer, Reply

_users = iter(range(32001, 32999))

pytestmark = pytest.mark.usefixtures("whole_replies")


@pytest.fixture
def logs() -> Iterator[list[str]]:
    with captured_logs("INFO", with_level=False) as lines:
        yield lines


@pytest.fixture
async def make_runner(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    """Runners with hooks registered on request; everything removed afterwards."""
    from amrita_plugin_memory.adapters.subconscious_hooks import SubconsciousHooks
    from amrita_plugin_memory.subconscious import create_runner

    runners: list[Any] = []

    def make(uid: int | None = None, *, hooks: bool = False, **overrides: Any) -> Any:
        rt = runtime()
        uid = uid or next(_users)
        sub = rt.config.file.subconscious.model_copy(
            update={"enabled": True, "target_user_id": str(uid), **overrides}
        )
        runner = create_runner(
            rt, sub, state_uid=f"test-{uuid.uuid4().hex[:12]}", config_dir=tmp_path / "config"
        )
        if hooks:
            runner.hooks = SubconsciousHooks(runner)
            runner.hooks.register()
        runners.append(runner)
        return runner

    yield make
    for runner in runners:
        if runner.hooks is not None:
            runner.hooks.unregister()
        await runner.shutdown()


# ---------------------------------------------------------------------------
# Event-driven backoff
# ---------------------------------------------------------------------------


async def test_penalty_and_planned_run_time(make_runner: Callable[..., Any]) -> None:
    from amrita_plugin_memory.subconscious.scheduling import compute_delay

    runner = make_runner()
    scheduler = runner.planner.scheduler
    assert scheduler.running
    assert runner.penalty == 0 and runner.next_run_time is None
    expected = {1: 30.0, 2: 45.0, 5: 30 * 1.5**4, 20: 1440.0}
    sent = 0
    for count, minutes in expected.items():
        while sent < count:
            runner.on_target_message()
            sent += 1
        assert runner.penalty == count
        assert compute_delay(runner.config, count) == timedelta(minutes=minutes)
        planned = runner.next_run_time
        assert planned is not None and planned.tzinfo is not None
        # Timezone-aware, in the scheduler's zone (pitfall P8) …
        assert planned.utcoffset() == datetime.now(scheduler.timezone).utcoffset()
        assert str(planned.tzinfo) == str(scheduler.timezone)
        # … and `delay` from now, in absolute time.
        lead = planned - datetime.now(UTC)
        assert abs(lead - timedelta(minutes=minutes)) < timedelta(seconds=5), (count, lead)
        # Exactly one planned run.
        assert [j.id for j in scheduler.get_jobs() if j.id == runner.job_id] == [runner.job_id]
    assert compute_delay(runner.config, 10_000) == timedelta(minutes=1440)  # no overflow
    assert compute_delay(runner.config, 0) == timedelta(minutes=30)


async def test_planned_run_fires_and_resets_the_penalty(
    chat_server: ChatServer, make_runner: Callable[..., Any]
) -> None:
    import asyncio

    runner = make_runner(rethink_base_delay_minutes=0.01)  # 0.6 s
    runner.on_target_message()
    chat_server.script(Reply.tool_call("subconscious_iter_stop", {"summary": "定时运行"}))
    async with asyncio.timeout(60):  # a hang guard, not a measurement (a loaded box is slow)
        while not (runner.state["total_runs"] == 1 and runner.current_cycle is None):  # noqa: ASYNC110 - the scheduler runs it
            await asyncio.sleep(0.05)
    assert runner.state["total_runs"] == 1
    assert runner.state["last_abstracts"][-1]["summary"] == "定时运行"
    assert runner.penalty == 0
    assert runner.next_run_time is None  # no self-loop: idle until the user speaks


# ---------------------------------------------------------------------------
# setup_subconscious
# ---------------------------------------------------------------------------


def registrations() -> dict[str, Any]:
    import nonebot
    from amrita_core import ToolsManager
    from amrita_sense.hook.matcher import EventRegistry
    from nonebot.matcher import matchers
    from nonebot_plugin_apscheduler import scheduler

    driver = nonebot.get_driver()
    return {
        "tools": sorted(ToolsManager().tools_meta()),
        "hooks": {
            event: sum(len(handlers) for handlers in by_priority.values())
            for event, by_priority in EventRegistry().get_all().items()
        },
        "matchers": sum(len(m) for m in matchers.values()),
        "jobs": sorted(j.id for j in scheduler.get_jobs()),
        "startup": list(driver._lifespan._startup_funcs),  # type: ignore[attr-defined]
        "shutdown": list(driver._lifespan._shutdown_funcs),  # type: ignore[attr-defined]
    }


@pytest.mark.parametrize(
    "sub",
    [{}, {"enabled": False, "target_user_id": "32999"}, {"enabled": True, "target_user_id": "  "}],
)
async def test_disabled_registers_nothing(
    tmp_path: Path, chat_server: ChatServer, sub: dict[str, Any]
) -> None:
    from amrita_plugin_memory.adapters.subconscious import setup_subconscious

    rt = runtime_with(tmp_path, **sub) if sub else runtime()
    before = registrations()
    assert setup_subconscious(rt) is None
    assert registrations() == before
    assert not (rt.config.config_dir / "prompt").exists()
    assert chat_server.requests == []


async def test_enabled_setup_registers_hooks_jobs_on_demand_and_files(
    tmp_path: Path, chat_server: ChatServer, logs: list[str]
) -> None:
    import nonebot

    from amrita_plugin_memory.adapters.subconscious import setup_subconscious

    uid = next(_users)
    rt = runtime_with(tmp_path, enabled=True, target_user_id=str(uid))
    before = registrations()
    runner = setup_subconscious(rt)
    assert runner is not None
    lifespan = nonebot.get_driver()._lifespan  # type: ignore[attr-defined]
    try:
        after = registrations()
        # Only the chat LLM's knowledge tools join the global registry (never a loop tool).
        assert set(after["tools"]) == set(before["tools"]) | {
            "knowledge_list",
            "knowledge_read",
            "knowledge_search",
            "knowledge_suggest",
        }
        assert after["matchers"] == before["matchers"] + 1
        assert sum(after["hooks"].values()) == sum(before["hooks"].values()) + 2
        assert after["jobs"] == before["jobs"]  # nothing planned until the user speaks
        assert (
            runner.start in after["startup"]
            and len(after["shutdown"]) == len(before["shutdown"]) + 1
        )
        prompt_dir = rt.config.config_dir / "prompt"
        assert sorted(p.name for p in prompt_dir.iterdir()) == [
            "knowledge_guide.md.jinja2",
            "profile_guide.md.jinja2",
            "subconscious_main.md.jinja2",
            "subconscious_send.md.jinja2",
        ]
        assert runner.tools.has_tool("subconscious_iter_stop")
        await runner.start()
        assert logs[-2:] == [
            f"[Subconscious] Starting for user={uid}",
            "[Subconscious] Idle — waiting for user chat to trigger first run",
        ]
        assert chat_server.requests == []  # no token spent while idle
        # The target user's message (any chat) plans a run through the hook.
        await run_turn(make_bot(BotRecorder()), group_event(uid, 22001, "大家好", to_me=False))
        assert runner.penalty == 1 and runner.next_run_time is not None
        # Driver shutdown: hooks removed, plan cancelled.
        await after["shutdown"][-1]()
        assert runner.active is False and runner.next_run_time is None
        assert registrations()["matchers"] == before["matchers"]
        assert registrations()["hooks"] == before["hooks"]
    finally:
        if runner.hooks is not None:
            runner.hooks.unregister()
        await runner.shutdown()
        # Driver hooks cannot be unregistered through NoneBot's API.
        for funcs, known in (
            (lifespan._startup_funcs, before["startup"]),
            (lifespan._shutdown_funcs, before["shutdown"]),
        ):
            funcs[:] = [f for f in funcs if f in known]
    assert registrations() == before


# ---------------------------------------------------------------------------
# Isolation from the chat
# ---------------------------------------------------------------------------


async def test_loop_tools_absent_from_the_chat_llm(
    chat_server: ChatServer, make_runner: Callable[..., Any]
) -> None:
    from amrita_core import ToolsManager

    runner = make_runner(hooks=True, allow_send_to_user=True)
    uid = int(runner.target_user_id)
    chat_server.script(Reply.text("你好"))
    await run_turn(make_bot(BotRecorder()), private_event(uid, "你好"))
    requests = chat_requests(chat_server)
    assert requests
    for request in chat_server.requests:  # every request, content check included
        names = [t["function"]["name"] for t in request.get("tools") or []]
        assert not [n for n in names if n.startswith("subconscious_")], names
    assert "write_memory" in {t["function"]["name"] for t in requests[0]["tools"]}
    assert not [n for n in ToolsManager().tools_meta() if n.startswith("subconscious_")]
    assert runner.penalty == 1  # the turn itself counted as a target message


# ---------------------------------------------------------------------------
# Pending messages
# ---------------------------------------------------------------------------


async def test_pending_messages_delivered_once_in_private_never_in_group(
    chat_server: ChatServer, make_runner: Callable[..., Any]
) -> None:
    runner = make_runner(hooks=True)
    uid = int(runner.target_user_id)
    chat_server.script(
        Reply.tool_call("subconscious_note_for_user", {"intent": "提醒用户明天<b>带伞</b>"}),
        Reply.tool_call("subconscious_note_for_user", {"intent": "提醒用户明天<b>带伞</b>"}),
        Reply.tool_call("subconscious_iter_stop", {"summary": "记下了一条提醒"}),
    )
    result = await runner.run_cycle()
    assert result.outcome == "success"
    assert [p["intent"] for p in runner.state["pending_messages"]] == ["提醒用户明天<b>带伞</b>"]
    assert len((await runner.state_store.load())["pending_messages"]) == 1

    # Another user's private turn and the target's group turn: not delivered.
    chat_server.clear()
    chat_server.script(Reply.text("你好"), Reply.text("大家好"))
    await run_turn(make_bot(BotRecorder()), private_event(uid + 500, "你好"))
    await run_turn(make_bot(BotRecorder()), group_event(uid, 22002, "大家好"))
    prompts = [seen_by_model(r) for r in chat_requests(chat_server)]
    assert len(prompts) >= 2
    assert all("SUBCONSCIOUS_NOTES" not in p and "带伞" not in p for p in prompts)
    assert len(runner.state["pending_messages"]) == 1

    # The target's next private turn: shown in every request of the turn, then removed.
    chat_server.clear()
    chat_server.script(
        Reply.tool_call("list_memory", {"limit": 5, "scope": "user"}), Reply.text("记得带伞哦")
    )
    await run_turn(make_bot(BotRecorder()), private_event(uid, "在吗"))
    requests = chat_requests(chat_server)
    assert len(requests) >= 2
    for request in requests:
        # After the chat history, in this turn's message only (never the system prompt).
        assert "SUBCONSCIOUS_NOTES" not in system_prompt(request)
        message = turn_message(request)
        assert message.count("<SUBCONSCIOUS_NOTES>") == 1
        assert "- 提醒用户明天<b>带伞</b>" in message  # verbatim: no HTML escaping
    assert runner.state["pending_messages"] == []
    assert (await runner.state_store.load())["pending_messages"] == []

    # Delivered exactly once.
    chat_server.clear()
    chat_server.script(Reply.text("嗯"))
    await run_turn(make_bot(BotRecorder()), private_event(uid, "好的"))
    assert all("SUBCONSCIOUS_NOTES" not in seen_by_model(r) for r in chat_requests(chat_server))


async def test_pending_message_survives_a_failed_turn(
    chat_server: ChatServer, make_runner: Callable[..., Any], no_retries: None
) -> None:
    runner = make_runner(hooks=True)
    uid = int(runner.target_user_id)
    await runner.pending.add("告诉用户周报已经整理好了")

    chat_server.set_mode("error500")
    await run_turn(make_bot(BotRecorder()), private_event(uid, "在吗"))
    chat_server.set_mode("ok")
    assert len(runner.state["pending_messages"]) == 1  # shown to a failed turn: kept

    chat_server.clear()
    chat_server.script(Reply.text("周报好了"))
    await run_turn(make_bot(BotRecorder()), private_event(uid, "在吗"))
    assert any("周报已经整理好了" in seen_by_model(r) for r in chat_requests(chat_server))
    assert runner.state["pending_messages"] == []


# ---------------------------------------------------------------------------
# Sending to the user
# ---------------------------------------------------------------------------


def connect(recorder: BotRecorder) -> Any:
    """Make a recording bot *the* connected bot (``nonebot.get_bot()``)."""
    import nonebot

    from tests.events import BOT_ID

    driver = nonebot.get_driver()
    old = nonebot.get_bots().get(str(BOT_ID))
    if old is not None:
        driver._bot_disconnect(old)  # type: ignore[attr-defined]
    bot = make_bot(recorder)
    assert nonebot.get_bot() is bot
    return bot


def compose_rule(body: dict[str, Any]) -> Reply | None:
    return None if body.get("tools") else Reply.text("明天降温，记得多穿点～")


async def test_send_to_user_generates_and_sends(
    chat_server: ChatServer, make_runner: Callable[..., Any]
) -> None:
    rt = runtime()
    runner = make_runner(allow_send_to_user=True)
    uid = int(runner.target_user_id)
    await rt.store.add(new_memory(partition(uid), "user", "用户怕冷，冬天总是穿很多"))
    recorder = BotRecorder()
    bot = connect(recorder)
    # The target was last seen through this bot (the hook doing this: tests/test_l3_delivery.py).
    runner.messenger.saw_target(str(bot.self_id))
    chat_server.set_rule(compose_rule)
    chat_server.script(
        Reply.tool_call("subconscious_send_to_user", {"intent": "天气降温，关心用户保暖"}),
        Reply.tool_call("subconscious_send_to_user", {"intent": "再说一次"}),
        Reply.tool_call("subconscious_iter_stop", {"summary": "提醒了用户保暖"}),
    )
    result = await runner.run_cycle()
    assert result.outcome == "success" and result.actions == {"send": 1}
    loop = [r for r in chat_server.requests if r.get("tools")]
    names = {t["function"]["name"] for t in loop[0]["tools"]}
    assert "subconscious_send_to_user" in names and "subconscious_note_for_user" not in names
    compose = [r for r in chat_server.requests if not r.get("tools")]
    assert len(compose) == 1
    prompt = compose[0]["messages"][0]["content"]
    assert "天气降温，关心用户保暖" in prompt and "用户怕冷，冬天总是穿很多" in prompt
    sent = [c for c in recorder.calls if c.api == "send_private_msg"]
    assert [(c.data["user_id"], c.data["message"]) for c in sent] == [
        (uid, "明天降温，记得多穿点～")
    ]
    second = json.loads(loop[2]["messages"][-1]["content"])
    assert second["ok"] is False and "已经主动发送过" in second["error"]
    assert runner.state["pending_messages"] == []


async def test_send_failure_queues_the_message(
    chat_server: ChatServer, make_runner: Callable[..., Any]
) -> None:
    runner = make_runner(allow_send_to_user=True)
    recorder = BotRecorder(fail_private=True)
    runner.messenger.saw_target(str(connect(recorder).self_id))
    chat_server.set_rule(compose_rule)
    chat_server.script(
        Reply.tool_call("subconscious_send_to_user", {"intent": "天气降温，关心用户保暖"}),
        Reply.tool_call("subconscious_iter_stop", {"summary": "想提醒保暖但没发出去"}),
    )
    result = await runner.run_cycle()
    assert result.outcome == "success" and result.actions == {"note": 1}
    pending = runner.state["pending_messages"]
    assert [(p["intent"], p.get("text")) for p in pending] == [
        ("天气降温，关心用户保暖", "明天降温，记得多穿点～")
    ]
    loop = [r for r in chat_server.requests if r.get("tools")]
    queued = json.loads(loop[-1]["messages"][-1]["content"])
    assert queued["delivered"] is False and queued["queued"] is True
    assert queued["reason"] == "发送失败：RuntimeError"  # the bot was asked and refused
