"""A forget of the L3 loop's target user: nothing of them is left in the loop, or rebuilt by it.

* Through real bot turns (``/memory user forget`` and its confirmation, the
  loop's message hook registered): the profile ``user_profile.md`` and the
  cycles' abstracts go, the cycle the command's own message planned is
  cancelled, and the reply says what was removed and what was not (Amrita's
  chat history, with the ``/session`` commands that clear it).
* A cycle running at the forget writes nothing afterwards: the model's answer
  arriving after the forget is not executed and no abstract is kept; a tool
  call already running is waited for, so what it writes goes with the forget.
* The loop never reads Amrita's chat history from before the forget: not the
  current context that spans it, not the sessions archived before it, not the
  session archived first after it.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.chat import BotRecorder, make_bot, request_tool_results, run_turn
from tests.events import private_event
from tests.helpers import new_memory, partition, runtime, view_of
from tests.servers import ChatServer, Reply

_users = iter(range(35001, 35999))

pytestmark = pytest.mark.usefixtures("embed_server")


def stop(summary: str) -> Reply:
    return Reply.tool_call("subconscious_iter_stop", {"summary": summary})


def loop_requests(server: ChatServer) -> list[dict[str, Any]]:
    return [
        r
        for r in server.requests
        if any(t["function"]["name"].startswith("subconscious_") for t in r.get("tools") or [])
    ]


def stores() -> Any:
    from amrita_plugin_memory.adapters.group_hooks import current_hooks

    hooks = current_hooks()
    assert hooks is not None
    return hooks.awareness.stores


@pytest.fixture
async def make_runner(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    """Runners with their chat hooks registered and a data dir of their own (the profile)."""
    from amrita_plugin_memory.adapters.subconscious_hooks import SubconsciousHooks
    from amrita_plugin_memory.subconscious import create_runner

    runners: list[Any] = []

    def make(**overrides: Any) -> Any:
        rt = runtime()
        sub = rt.config.file.subconscious.model_copy(
            update={"enabled": True, "target_user_id": str(next(_users)), **overrides}
        )
        runner = create_runner(
            rt,
            sub,
            state_uid=f"test-{uuid.uuid4().hex[:12]}",
            config_dir=tmp_path / "config",
            data_dir=tmp_path / f"data-{len(runners)}",
        )
        runner.hooks = SubconsciousHooks(runner)
        runner.hooks.register()
        runners.append(runner)
        return runner

    yield make
    for runner in runners:
        runner.hooks.unregister()
        await runner.shutdown()


@pytest.fixture
def session_user_data() -> Iterator[Any]:
    """The chat's ``UserData`` (the ``/memory`` matcher's); its loop wiring restored after."""
    from amrita_plugin_memory.adapters.matchers import current_commands

    commands = current_commands()
    assert commands is not None and commands.users is not None
    data = commands.users.data
    saved = (data.loop, data.loop_target, data.profile, list(data.forget_fences))
    yield data
    data.loop, data.loop_target, data.profile = saved[:3]
    data.forget_fences[:] = saved[3]


def bound(runner: Any, data: Any | None = None) -> Any:
    """``data`` (a fresh ``UserData`` by default) wired to ``runner`` as the plugin wires it."""
    from amrita_plugin_memory.adapters.subconscious import bind_user_data

    wired = data if data is not None else runtime().user_data(stores())
    bind_user_data(runner, wired)
    return wired


async def command(user_id: int, text: str) -> str:
    recorder = BotRecorder()
    await run_turn(make_bot(recorder), private_event(user_id, text))
    (reply,) = recorder.texts("private")
    return reply


# ---------------------------------------------------------------------------
# Through the chat: profile, abstracts and the planned cycle go; the reply says so
# ---------------------------------------------------------------------------


async def test_forgetting_the_target_clears_the_loop_and_its_planned_cycle(
    chat_server: ChatServer, make_runner: Callable[..., Any], session_user_data: Any
) -> None:
    rt = runtime()
    runner = make_runner()
    uid = int(runner.target_user_id)
    bound(runner, session_user_data)
    await rt.store.add(new_memory(partition(uid), "user", "用户养了一只叫团子的猫"))
    await runner.profile.update("insert", section="body", start_line=1, content="养猫\n住在杭州")
    chat_server.script(stop("整理了关于团子的记忆"))
    assert (await runner.run_cycle()).outcome == "success"

    doc = await session_user_data.export(str(uid))
    assert doc["l3_profile"] == "---\n养猫\n住在杭州\n"
    assert [a["summary"] for a in doc["l3_abstracts"]] == ["整理了关于团子的记忆"]
    other = await session_user_data.export(str(next(_users)))
    assert other["l3_profile"] is None and other["l3_abstracts"] == []

    preview = await command(uid, "/memory user forget")
    assert "L3 循环整理出的用户画像 2 行" in preview, preview
    assert "L3 循环各轮的运行摘要 1 条" in preview
    assert "以下不会删除：" in preview and "/session forget" in preview
    assert runner.next_run_time is not None  # every message of the target plans a cycle

    done = await command(uid, "/memory user forget confirm")
    assert done.startswith("已删除机器人保存的你的数据：")
    for line in (
        "个人记忆 1 条",
        "L3 循环整理出的用户画像 2 行",
        "L3 循环各轮的运行摘要 1 条",
        "/session forget 清空当前上下文与摘要，/session clear 删除全部归档会话",
        "L3 循环今后不再读取遗忘之前的这些记录",
    ):
        assert line in done, (line, done)
    assert not runner.profile.path.exists()
    assert runner.state["last_abstracts"] == []
    assert (await runner.state_store.load())["last_abstracts"] == []
    # The confirmation planned a cycle too (the loop's message hook runs first): cancelled.
    assert runner.next_run_time is None
    assert await rt.store.count(view_of(partition(uid))) == 0


# ---------------------------------------------------------------------------
# A cycle running at the forget
# ---------------------------------------------------------------------------


def held_first_loop_request(
    reply: Reply,
) -> tuple[Callable[[dict[str, Any]], Reply | None], threading.Event, threading.Event]:
    """A rule holding the loop's first request until released, then answering ``reply``."""
    started, release = threading.Event(), threading.Event()
    served: list[int] = []

    def rule(body: dict[str, Any]) -> Reply | None:
        if served or not any(
            t["function"]["name"].startswith("subconscious_") for t in body.get("tools") or []
        ):
            return None
        served.append(1)
        started.set()
        release.wait(20)
        return reply

    return rule, started, release


async def test_an_answer_arriving_after_the_forget_writes_nothing(
    chat_server: ChatServer, make_runner: Callable[..., Any]
) -> None:
    rt = runtime()
    runner = make_runner()
    uid = int(runner.target_user_id)
    data = bound(runner)
    await rt.store.add(new_memory(partition(uid), "user", "用户在学日语"))
    writes = Reply.tool_call(
        "subconscious_write_memory",
        {"content": "用户在学日语，准备考 N2", "tags": ["学习"], "importance": "medium"},
        (
            "subconscious_update_profile",
            {"operation": "insert", "start_line": 1, "content": "在学日语"},
        ),
        ("subconscious_update_memo", {"content": "用户在学日语"}),
    )
    rule, started, release = held_first_loop_request(writes)
    chat_server.set_rule(rule)
    chat_server.script(stop("不应被请求"))
    task = asyncio.create_task(runner.run_cycle())
    try:
        assert await asyncio.to_thread(started.wait, 10)
        counts = await data.forget(str(uid))  # the model is still thinking
        assert counts.memories == 1
    finally:
        release.set()
    result = await asyncio.wait_for(task, 20)

    assert result.outcome == "interrupted" and result.actions == {}
    assert await rt.store.count(view_of(partition(uid))) == 0
    assert await rt.memo.get(view_of(partition(uid))) == ""
    assert not runner.profile.path.exists()
    assert runner.state["last_abstracts"] == []  # the fenced cycle keeps no abstract
    assert len(loop_requests(chat_server)) == 1


async def test_a_tool_call_running_at_the_forget_is_waited_for_and_removed_with_it(
    chat_server: ChatServer, make_runner: Callable[..., Any]
) -> None:
    from amrita_plugin_memory.subconscious.toolsets.base import LoopTool, SimpleGroup
    from amrita_plugin_memory.tools.schemas import define

    rt = runtime()
    runner = make_runner()
    uid = int(runner.target_user_id)
    data = bound(runner)
    entered, release = asyncio.Event(), asyncio.Event()
    late: list[dict[str, Any]] = []

    async def slow_write(args: Any, ctx: Any) -> dict[str, Any]:
        entered.set()
        await release.wait()  # e.g. a slow embedding service
        record = await rt.store.add(new_memory(partition(uid), "user", "用户说过明天去医院"))
        return {"ok": True, "id": record.id}

    async def after(args: Any, ctx: Any) -> dict[str, Any]:
        late.append(dict(args))
        return {"ok": True}

    schema = define("subconscious_slow_write", "写一条记忆（慢）", {}, [])
    later = define("subconscious_after", "之后的调用", {}, [])
    runner.add_tool_group(
        SimpleGroup("slow", [LoopTool(schema, slow_write), LoopTool(later, after)])
    )
    chat_server.script(
        Reply.tool_call("subconscious_slow_write", {}),
        Reply.tool_call("subconscious_after", {}),
        stop("不应被请求"),
    )
    task = asyncio.create_task(runner.run_cycle())
    await asyncio.wait_for(entered.wait(), 10)
    forget = asyncio.create_task(data.forget(str(uid)))
    await asyncio.sleep(0.3)
    assert not forget.done()  # it waits for the running call…
    assert runner.fence.forgets == 1 and not runner.fence.open_for(None)  # …nothing else runs
    release.set()
    counts = await asyncio.wait_for(forget, 20)
    result = await asyncio.wait_for(task, 20)

    assert counts.memories == 1  # written before the removal, removed with it
    assert await rt.store.count(view_of(partition(uid))) == 0
    assert late == [] and result.outcome == "interrupted"
    assert runner.state["last_abstracts"] == []


async def test_a_forget_stops_when_a_running_call_does_not_end(
    make_runner: Callable[..., Any],
) -> None:
    runner = make_runner()
    runner.fence.wait_seconds = 0.2
    data = bound(runner)
    from amrita_plugin_memory.upkeep.users.user_data import ForgetBlocked

    async with runner.fence.tool_call(None) as may_run:  # a call outside any cycle
        assert may_run
        with pytest.raises(ForgetBlocked, match="没有结束"):
            await data.forget(runner.target_user_id)
    assert runner.fence.forgets == 0  # the fence opens again for the retry
    assert runner.target_user_id in await runtime().forgotten.entries()
    await data.forget(runner.target_user_id)  # completes when run again


# ---------------------------------------------------------------------------
# Amrita's chat history from before the forget is never read again
# ---------------------------------------------------------------------------


async def write_context(uid: int, texts: list[str]) -> None:
    from amrita_core.types import Message
    from nonebot_plugin_amrita.memory import CachedUserDataRepository

    repo = CachedUserDataRepository()
    data = await repo.get_memory(partition(uid))
    data.memory_json.messages = [
        Message(role="user" if i % 2 == 0 else "assistant", content=text)
        for i, text in enumerate(texts)
    ]
    data.memory_json.abstract = f"更早：{texts[0]}"
    await repo.update_memory_data(data)


async def archive_context(uid: int, texts: list[str]) -> None:
    """An archived session with ``texts`` (Amrita archives a context that timed out)."""
    from amrita_core import MemoryModel
    from amrita_core.types import Message
    from nonebot_plugin_amrita.database import UserDataExecutor
    from nonebot_plugin_amrita.memory import CachedUserDataRepository

    await CachedUserDataRepository().get_memory(partition(uid))  # creates the user rows
    async with UserDataExecutor(partition(uid)) as executor:
        await executor.add_session(
            MemoryModel(messages=[Message(role="user", content=t) for t in texts])
        )


def summaries_rule(body: dict[str, Any]) -> Reply | None:
    """Summaries of archived sessions repeat the session's first line."""
    if body.get("tools"):
        return None
    text = json.dumps(body, ensure_ascii=False)
    return Reply.text(
        "摘要：" + ("东京" if "东京" in text else "大阪" if "大阪" in text else "其他")
    )


async def test_the_loop_reads_no_chat_history_from_before_the_forget(
    chat_server: ChatServer, make_runner: Callable[..., Any]
) -> None:
    runner = make_runner()
    uid = int(runner.target_user_id)
    data = bound(runner)
    await archive_context(uid, ["我下周要去东京出差"])
    await write_context(uid, ["我的银行卡密码是生日", "记住了", "别告诉别人"])
    chat_server.set_rule(summaries_rule)
    read = (
        Reply.tool_call(
            "subconscious_read_chat_context", {}, ("subconscious_read_sessions", {"limit": 5})
        ),
        stop("看过聊天记录"),
    )
    chat_server.script(*read)
    assert (await runner.run_cycle()).outcome == "success"
    context, sessions = request_tool_results(loop_requests(chat_server)[-1])
    assert context["total"] == 3 and sessions["total"] == 1  # before: everything is read

    await data.forget(str(uid))
    chat_server.clear()
    chat_server.set_rule(summaries_rule)
    chat_server.script(*read)
    assert (await runner.run_cycle()).outcome == "success"
    first = loop_requests(chat_server)[0]["messages"][1]["content"]
    assert "银行卡" not in first and "<RECENT_CHAT>" not in first
    context, sessions = request_tool_results(loop_requests(chat_server)[-1])
    assert context == {"ok": True, "total": 0, "messages": []}
    assert sessions["total"] == 0 and sessions["sessions"] == []

    # Amrita archives the context that spanned the forget (it may begin before it), a
    # new one follows and is archived too, and a third is current: only the later two.
    await archive_context(uid, ["我的银行卡密码是生日", "下周去大阪"])
    await archive_context(uid, ["下周去大阪，住心斋桥"])
    await write_context(uid, ["刚到大阪", "欢迎"])
    chat_server.clear()
    chat_server.set_rule(summaries_rule)
    chat_server.script(*read)
    assert (await runner.run_cycle()).outcome == "success"
    first = loop_requests(chat_server)[0]["messages"][1]["content"]
    assert "刚到大阪" in first and "银行卡" not in first
    context, sessions = request_tool_results(loop_requests(chat_server)[-1])
    assert [m["text"] for m in context["messages"]] == ["刚到大阪", "欢迎"]
    assert sessions["total"] == 1 and sessions["sessions"][0]["summary"] == "摘要：大阪"
    assert "东京" not in str(sessions)


def test_after_forget_keeps_what_began_after_it() -> None:
    from amrita_plugin_memory.subconscious.amrita_data import after_forget

    at = time.time()
    assert after_forget([at - 10, at - 5], float, at) == ([], False)
    assert after_forget([], float, at) == ([], False)
    assert after_forget([at + 3, at - 1, at + 1, at + 2], float, at) == ([at + 2, at + 3], True)
    assert after_forget([at, at + 1], float, at) == ([], True)  # "at" itself is not after
