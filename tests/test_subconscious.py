"""L3 offline consolidation loop: full cycles against the scripted LLM server.

The plugin in the test session is loaded with L3 disabled (the default), so
every test builds its own runner from the session runtime with an enabled
``[subconscious]`` section, its own state row, its own templates directory
and its own target user, and shuts it down afterwards.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.chat import offered, request_tool_results
from tests.conftest import captured_logs
from tests.helpers import new_memory, partition, runtime, view_of
from tests.servers import ChatServer, Reply

_users = iter(range(31001, 31999))


def loop_requests(server: ChatServer) -> list[dict[str, Any]]:
    """Requests made by the loop's agent (they offer the loop's tools)."""
    return [
        r
        for r in server.requests
        if any(t["function"]["name"].startswith("subconscious_") for t in r.get("tools") or [])
    ]


MEMORY_TOOLS = {
    "subconscious_read_memory",
    "subconscious_write_memory",
    "subconscious_update_memory",
    "subconscious_delete_memory",
    "subconscious_list_memory",
    "subconscious_duplicate_helper",
    "subconscious_get_memory_stats",
    "subconscious_read_memo",
    "subconscious_update_memo",
    "subconscious_read_chat_context",
    "subconscious_read_sessions",
    "subconscious_iter_stop",
}
PROFILE_TOOLS = {"subconscious_get_profile", "subconscious_update_profile"}
KNOWLEDGE_TOOLS = {
    "subconscious_knowledge_list",
    "subconscious_knowledge_read",
    "subconscious_knowledge_create",
    "subconscious_knowledge_update",
    "subconscious_knowledge_delete",
    "subconscious_knowledge_search",
    "subconscious_read_suggestions",
}


@pytest.fixture
async def make_runner(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    from amrita_plugin_memory.subconscious import create_runner

    runners: list[Any] = []

    def make(uid: int | None = None, *, state_uid: str | None = None, **overrides: Any) -> Any:
        rt = runtime()
        uid = uid or next(_users)
        sub = rt.config.file.subconscious.model_copy(
            update={"enabled": True, "target_user_id": str(uid), **overrides}
        )
        runner = create_runner(
            rt,
            sub,
            state_uid=state_uid or f"test-{uuid.uuid4().hex[:12]}",
            config_dir=tmp_path / "config",
        )
        runners.append(runner)
        return runner

    yield make
    for runner in runners:
        if runner.hooks is not None:
            runner.hooks.unregister()
        await runner.shutdown()


async def insights() -> Any:
    from nonebot_plugin_amrita.database import InsightsModel

    return await InsightsModel.get()


# ---------------------------------------------------------------------------
# A full cycle: find two duplicates, merge them, stop
# ---------------------------------------------------------------------------


async def test_full_cycle_merges_duplicates(
    chat_server: ChatServer, make_runner: Callable[..., Any]
) -> None:
    rt = runtime()
    runner = make_runner()
    uid = int(runner.target_user_id)
    part = partition(uid)
    a = await rt.store.add(new_memory(part, "user", "用户喜欢喝美式咖啡，不加糖", tags=["饮食"]))
    b = await rt.store.add(
        new_memory(part, "user", "用户很喜欢喝美式咖啡，不加糖。", tags=["偏好"])
    )
    other = await rt.store.add(
        new_memory(part, "user", "用户的生日是5月1日", tags=["身份"], importance="high")
    )
    merged = "用户很喜欢喝美式咖啡，不加糖"
    chat_server.script(
        Reply.tool_call("subconscious_duplicate_helper", {}),
        Reply.tool_call(
            "subconscious_update_memory",
            {"id": a.id, "content": merged, "tags": ["饮食", "偏好"], "importance": "medium"},
        ),
        Reply.tool_call("subconscious_delete_memory", {"id": b.id}),
        Reply.tool_call("subconscious_iter_stop", {"summary": "合并了两条关于咖啡的重复记忆"}),
        Reply.text("不应被请求"),
    )
    before = await insights()

    result = await runner.run_cycle()

    assert result.outcome == "success", result
    assert result.number == 1
    assert result.actions == {"update": 1, "delete": 1}
    # The store afterwards: one merged memory, the unrelated one untouched.
    records = {r.id: r for r in await rt.store.list(view_of(part))}
    assert set(records) == {a.id, other.id}
    assert records[a.id].content == merged and records[a.id].tags == ["饮食", "偏好"]
    assert records[other.id].content == "用户的生日是5月1日"
    # Nothing lost: the deleted duplicate and the replaced text are in the archive.
    archived = {(r.id, r.reason) for r in await rt.store.archive.list(view_of(part), limit=10)}
    assert (b.id, "deleted") in archived
    assert any(row_id.startswith(f"{a.id}~") and why == "updated" for row_id, why in archived)

    requests = loop_requests(chat_server)
    assert len(requests) == 4  # iter_stop ends the cycle: no fifth request
    assert chat_server.pending == 1
    for request in requests:
        assert offered(request) == (
            MEMORY_TOOLS | PROFILE_TOOLS | KNOWLEDGE_TOOLS | {"subconscious_note_for_user"}
        )
        assert [m["role"] for m in request["messages"][:2]] == ["system", "user"]
    system = requests[0]["messages"][0]["content"]
    assert f"整理的用户：{uid}" in system
    # Fixed instructions first, the run's data last: the provider's cached prefix covers the rules.
    assert system.index("## 规则") < system.index("## 运行信息") < system.index("<LAST_RUN>")
    assert "已完成的整理轮数：0" in system
    assert "<LAST_RUN>\n（从未运行，这是第一轮）\n</LAST_RUN>" in system
    assert "<LAST_ABSTRACTS>\n（暂无记录）\n</LAST_ABSTRACTS>" in system
    assert "当前时间：20" in system
    assert "离线巩固循环" in system and "<SCHEMA>" not in system
    assert "{{" not in system
    user = requests[0]["messages"][1]["content"]
    assert "开始第 1 轮整理" in user and "L2 记忆：3 条" in user

    # The duplicate helper found exactly the coffee pair.
    helper = request_tool_results(requests[1])[0]
    assert helper["ok"] is True and helper["scanned"] == 3
    assert len(helper["groups"]) == 1
    assert {m["id"] for m in helper["groups"][0]["memories"]} == {a.id, b.id}
    assert "subconscious_update_memory" in helper["guidance"]

    # Usage added once to Amrita's global statistics: 4 requests of 11/7 tokens.
    after = await insights()
    assert after.usage_count - before.usage_count == 1
    assert after.token_input - before.token_input == 4 * 11
    assert after.token_output - before.token_output == 4 * 7
    assert result.usage is not None and result.usage.prompt_tokens == 44

    # The state: one run with its abstract.
    assert runner.state["total_runs"] == 1
    assert runner.state["last_abstracts"][-1]["summary"] == "合并了两条关于咖啡的重复记忆"
    assert runner.state["last_abstracts"][-1]["outcome"] == "success"


# ---------------------------------------------------------------------------
# State across cycles and restarts
# ---------------------------------------------------------------------------


def stop(summary: str) -> Reply:
    return Reply.tool_call("subconscious_iter_stop", {"summary": summary})


async def test_state_saved_and_reloaded_across_a_restart(
    chat_server: ChatServer, make_runner: Callable[..., Any]
) -> None:
    state_uid = f"test-{uuid.uuid4().hex[:12]}"
    first = make_runner(state_uid=state_uid, max_abstracts=2)
    for i in (1, 2, 3):
        chat_server.script(stop(f"第{i}轮的工作"))
        result = await first.run_cycle()
        assert (result.outcome, result.number) == ("success", i)
    stored = await first.state_store.load()
    assert stored["total_runs"] == 3
    assert [a["summary"] for a in stored["last_abstracts"]] == ["第2轮的工作", "第3轮的工作"]
    await first.shutdown()

    # A new process: a new runner on the same row.
    second = make_runner(int(first.target_user_id), state_uid=state_uid, max_abstracts=2)
    assert second.state["total_runs"] == 0  # nothing before start()
    await second.start()
    assert second.state["total_runs"] == 3
    chat_server.clear()
    chat_server.script(stop("第4轮的工作"))
    result = await second.run_cycle()
    assert (result.outcome, result.number) == ("success", 4)
    system = loop_requests(chat_server)[0]["messages"][0]["content"]
    assert "已完成的整理轮数：3" in system
    last_run = system[system.index("<LAST_RUN>") : system.index("</LAST_RUN>")]
    assert "第 3 轮（完成）：第3轮的工作" in last_run
    assert "第2轮的工作" in system and "第1轮的工作" not in system
    stored = await second.state_store.load()
    assert stored["total_runs"] == 4
    assert [a["summary"] for a in stored["last_abstracts"]] == ["第3轮的工作", "第4轮的工作"]
    assert set(stored) == {
        "total_runs",
        "last_abstracts",
        "pending_messages",
        "knowledge_suggestions",
    }


async def test_garbage_state_row_degrades_to_defaults(make_runner: Callable[..., Any]) -> None:
    from nonebot_plugin_orm import get_session

    from amrita_plugin_memory.storage.models import LoopItem, SubconsciousState, db_now

    state_uid = f"test-{uuid.uuid4().hex[:12]}"
    garbage = [
        ("abstract", "a0", {"summary": ""}),
        ("abstract", "a1", {"summary": "保留", "cycle": 2}),
        ("abstract", "a2", {"summary": "坏的轮次", "cycle": "x", "outcome": "?"}),
        ("pending", "p0", {"text": "没有 intent"}),
        ("pending", "p1", {"intent": "提醒带伞"}),
        ("suggestion", "s0", {"action": "burn", "title": "未知动作"}),
        ("elsewhere", "e0", {"intent": "未知的种类"}),
    ]
    async with get_session() as session:
        session.add(
            SubconsciousState(uid=state_uid, data={"total_runs": "many"}, updated_at=db_now())
        )
        session.add_all(
            LoopItem(loop=state_uid, kind=kind, item_id=i, user_id="", since_us=0, data=data)
            for kind, i, data in garbage
        )
        await session.commit()
    runner = make_runner(state_uid=state_uid)
    state = await runner.load_state()
    assert state["total_runs"] == 0
    assert [a["summary"] for a in state["last_abstracts"]] == ["保留", "坏的轮次"]
    assert state["last_abstracts"][1]["cycle"] == 0
    assert [p["id"] for p in state["pending_messages"]] == ["p1"]
    assert state["knowledge_suggestions"] == []


# ---------------------------------------------------------------------------
# Penalty: success resets, failure keeps
# ---------------------------------------------------------------------------


async def test_success_resets_and_failure_keeps_the_penalty(
    chat_server: ChatServer, make_runner: Callable[..., Any], no_retries: None
) -> None:
    runner = make_runner()
    for _ in range(3):
        runner.on_target_message()
    assert runner.penalty == 3
    planned = runner.next_run_time

    chat_server.set_mode("error500")
    failed = await runner.run_cycle()
    chat_server.set_mode("ok")
    assert failed.outcome == "failed" and failed.error
    assert runner.penalty == 3
    assert runner.next_run_time == planned  # the failure does not touch the plan
    assert runner.state["total_runs"] == 1
    assert runner.state["last_abstracts"][-1]["outcome"] == "failed"

    chat_server.clear()
    chat_server.script(stop("整理完成"))
    ok = await runner.run_cycle()
    assert ok.outcome == "success" and ok.number == 2
    assert runner.penalty == 0


async def test_answer_without_iter_stop_still_ends_the_cycle(
    chat_server: ChatServer, make_runner: Callable[..., Any]
) -> None:
    runner = make_runner()
    runner.on_target_message()
    chat_server.script(Reply.text("没什么需要整理的"))
    result = await runner.run_cycle()
    assert result.outcome == "success"
    assert "未调用 subconscious_iter_stop" in result.summary
    assert runner.penalty == 0
    assert len(loop_requests(chat_server)) == 1


# ---------------------------------------------------------------------------
# The target user speaks while a cycle runs
# ---------------------------------------------------------------------------


def blocking_rule(
    reply: Reply,
) -> tuple[Callable[[dict[str, Any]], Reply | None], threading.Event, threading.Event]:
    """A rule that holds the loop's first request until released."""
    started, release = threading.Event(), threading.Event()
    served = []

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


async def test_target_message_during_a_cycle(
    chat_server: ChatServer, make_runner: Callable[..., Any]
) -> None:
    rt = runtime()
    runner = make_runner()
    part = partition(int(runner.target_user_id))
    record = await rt.store.add(new_memory(part, "user", "用户在学日语"))
    rule, started, release = blocking_rule(
        Reply.tool_call("subconscious_delete_memory", {"id": record.id})
    )
    chat_server.set_rule(rule)
    task = asyncio.create_task(runner.run_cycle())
    assert await asyncio.to_thread(started.wait, 10)
    assert runner.current_cycle is not None

    runner.on_target_message()  # the user speaks while the model is thinking
    release.set()
    result = await asyncio.wait_for(task, 20)

    assert result.outcome == "interrupted"
    # The tool call the model asked for after the interruption was not executed.
    assert await rt.store.get(view_of(part), record.id) is not None
    assert len(loop_requests(chat_server)) == 1
    # Consistent state: the run is counted with its abstract, the penalty stays,
    # and the run planned by the message stands.
    assert runner.state["total_runs"] == 1
    assert runner.state["last_abstracts"][-1]["outcome"] == "interrupted"
    assert runner.penalty == 1
    assert runner.next_run_time is not None
    assert runner.current_cycle is None
    stored = await runner.state_store.load()
    assert stored["total_runs"] == 1


async def test_shutdown_terminates_a_stuck_cycle(
    chat_server: ChatServer, make_runner: Callable[..., Any]
) -> None:
    runner = make_runner()
    runner.shutdown_grace = 0.2
    rule, started, release = blocking_rule(stop("不会到达"))
    chat_server.set_rule(rule)
    task = asyncio.create_task(runner.run_cycle())
    try:
        assert await asyncio.to_thread(started.wait, 10)
        runner.on_target_message()
        await runner.shutdown()
        result = await asyncio.wait_for(task, 5)
    finally:
        release.set()
    assert result.outcome == "failed"
    assert runner.active is False and runner.next_run_time is None
    assert runner.state["last_abstracts"][-1]["outcome"] == "failed"
    # A stopped runner plans and runs nothing any more.
    runner.on_target_message()
    assert runner.next_run_time is None
    assert (await runner.run_cycle()).outcome == "skipped"


# ---------------------------------------------------------------------------
# Templates
# ---------------------------------------------------------------------------


@pytest.fixture
def logs() -> Iterator[list[str]]:
    with captured_logs("DEBUG") as lines:
        yield lines


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("你好 {{ unknown_variable }}", "未定义的变量"),
        ("{% if total_runs %}没有结束", "语法错误"),
        ("{{ memory_context }}", "未定义的变量"),  # a variable of another template
    ],
)
async def test_broken_main_template_fails_cleanly(
    chat_server: ChatServer,
    make_runner: Callable[..., Any],
    logs: list[str],
    source: str,
    expected: str,
) -> None:
    runner = make_runner()
    runner.on_target_message()
    path = runner.templates.path("prompt_file")
    path.write_text(source, encoding="utf-8")

    result = await runner.run_cycle()

    assert result.outcome == "failed" and expected in (result.error or "")
    assert str(path) in (result.error or "")
    errors = [line for line in logs if line.startswith("ERROR") and "[Subconscious]" in line]
    assert errors and expected in errors[-1]
    assert loop_requests(chat_server) == []  # no token spent
    assert runner.penalty == 1
    assert runner.state["total_runs"] == 0


async def test_templates_created_once_and_never_overwritten(
    tmp_path: Path, make_runner: Callable[..., Any]
) -> None:
    from amrita_plugin_memory.subconscious.consts import TEMPLATE_VARIABLES

    runner = make_runner()
    prompt_dir = tmp_path / "config" / "prompt"
    names = sorted(p.name for p in prompt_dir.iterdir())
    assert names == [
        "knowledge_guide.md.jinja2",
        "profile_guide.md.jinja2",
        "subconscious_main.md.jinja2",
        "subconscious_send.md.jinja2",
    ]
    # Every default renders with exactly its variables.
    for key, variables in TEMPLATE_VARIABLES.items():
        rendered = runner.templates.render(key, {name: f"<{name}>" for name in variables})
        for name in variables:
            assert f"<{name}>" in rendered, (key, name)
    (prompt_dir / "subconscious_send.md.jinja2").write_text(
        "我的模板 {{ intent }}", encoding="utf-8"
    )
    make_runner()
    assert (prompt_dir / "subconscious_send.md.jinja2").read_text(
        encoding="utf-8"
    ) == "我的模板 {{ intent }}"


# ---------------------------------------------------------------------------
# History limiting, the compression hint, allowed tools
# ---------------------------------------------------------------------------


async def seed_chat(uid: int, count: int) -> None:
    from amrita_core.types import Message
    from nonebot_plugin_amrita.memory import CachedUserDataRepository

    repo = CachedUserDataRepository()
    data = await repo.get_memory(partition(uid))
    data.memory_json.messages = [
        Message(role="user" if i % 2 == 0 else "assistant", content=f"第{i}条消息")
        for i in range(count)
    ]
    await repo.update_memory_data(data)


def summary_rule(body: dict[str, Any]) -> Reply | None:
    return None if body.get("tools") else Reply.text("较早的对话：用户在准备搬家")


@pytest.mark.parametrize("compress", [True, False])
async def test_recent_chat_is_limited(
    chat_server: ChatServer, make_runner: Callable[..., Any], compress: bool
) -> None:
    runner = make_runner(enable_memory_compress=compress)
    await seed_chat(int(runner.target_user_id), 30)
    chat_server.set_rule(summary_rule)
    chat_server.script(stop("看过聊天记录"))

    result = await runner.run_cycle()

    assert result.outcome == "success"
    summaries = [r for r in chat_server.requests if not r.get("tools")]
    assert len(summaries) == (1 if compress else 0)
    user = loop_requests(chat_server)[0]["messages"][1]["content"]
    assert "<RECENT_CHAT>" in user and "[用户] 第28条消息" in user and "[Bot] 第29条消息" in user
    assert "第9条消息" not in user and "[用户] 第10条消息" in user
    if compress:
        assert "第0条消息" in json.dumps(summaries[0], ensure_ascii=False)
        assert "较早的对话：用户在准备搬家" in user
    else:
        assert "更早的 10 条消息已省略" in user
    # The user's stored chat is never touched.
    from nonebot_plugin_amrita.memory import CachedUserDataRepository

    stored = await CachedUserDataRepository().get_memory(partition(int(runner.target_user_id)))
    assert len(stored.memory_json.messages) == 30


async def test_compression_hint_and_allowed_tools(
    chat_server: ChatServer, make_runner: Callable[..., Any], logs: list[str]
) -> None:
    rt = runtime()
    runner = make_runner(memory_warn_threshold=2, allowed_tools=["read_memory", "no_such_tool"])
    part = partition(int(runner.target_user_id))
    for text in ("用户住在杭州", "用户养了一只橘猫"):
        await rt.store.add(new_memory(part, "user", text))
    chat_server.script(stop("无事"))
    await runner.run_cycle()
    request = loop_requests(chat_server)[0]
    assert "记忆过多" not in request["messages"][0]["content"]  # 2 is not above 2
    assert "read_memory" in offered(request)
    assert any("no_such_tool" in line and line.startswith("WARNING") for line in logs)
    assert not runner.tools.has_tool("read_memory")  # never added to the loop's own set

    await rt.store.add(new_memory(part, "user", "用户在学吉他"))
    chat_server.clear()
    chat_server.script(stop("无事"))
    await runner.run_cycle()
    system = loop_requests(chat_server)[0]["messages"][0]["content"]
    assert "记忆过多" in system and "已有 3 条" in system


# ---------------------------------------------------------------------------
# Memo, sessions, stats, bad arguments
# ---------------------------------------------------------------------------


async def test_memo_compression_and_argument_validation(
    chat_server: ChatServer, make_runner: Callable[..., Any]
) -> None:
    rt = runtime()
    runner = make_runner()
    uid = int(runner.target_user_id)
    await rt.memo.update(
        partition(uid), "用户叫小王。用户有三个项目：A 是网站，B 是小程序，C 是爬虫。"
    )
    chat_server.script(
        Reply.tool_call("subconscious_read_memo", {}),
        Reply.tool_call("subconscious_update_memo", {"content": "长" * (rt.memo.max_chars + 1)}),
        Reply.tool_call(
            "subconscious_write_memory",
            {
                "content": "用户有三个项目：A 网站、B 小程序、C 爬虫",
                "tags": ["项目"],
                "importance": "medium",
            },
        ),
        Reply.tool_call(
            "subconscious_update_memo", {"content": "用户叫小王。用户有 3 个项目（细节见记忆）。"}
        ),
        Reply.tool_call(
            "subconscious_write_memory", {"content": "x", "tags": [], "importance": "urgent"}
        ),
        Reply.tool_call("subconscious_delete_memory", {"id": "does-not-exist"}),
        Reply.tool_call("subconscious_get_memory_stats", {}),
        stop("把项目细节下放到 L2"),
    )
    result = await runner.run_cycle()
    assert result.outcome == "success"
    assert result.actions == {"write": 1, "memo": 1}
    results = request_tool_results(loop_requests(chat_server)[-1])
    # The last request carries every result but iter_stop's (no request follows it).
    memo, too_long, written, memo_ok, bad_enum, missing, stats = results
    assert memo["content"].startswith("用户叫小王") and memo["limit"] == rt.memo.max_chars
    assert too_long["ok"] is False and too_long["attempted_chars"] == rt.memo.max_chars + 1
    assert written["ok"] is True and memo_ok["ok"] is True
    assert "urgent" in bad_enum["raw"] and bad_enum["raw"].startswith("ERR:")  # Core's schema check
    assert missing["ok"] is False and "不存在" in missing["error"]
    assert stats["total"] == 1 and stats["by_tag"] == {"项目": 1}
    assert stats["by_importance"] == {"high": 0, "medium": 1, "low": 0}
    assert (
        await rt.memo.get(view_of(partition(uid))) == "用户叫小王。用户有 3 个项目（细节见记忆）。"
    )


async def test_read_sessions_summaries_are_cached(
    chat_server: ChatServer, make_runner: Callable[..., Any]
) -> None:
    from amrita_core import MemoryModel
    from amrita_core.types import Message
    from nonebot_plugin_amrita.database import UserDataExecutor
    from nonebot_plugin_amrita.memory import CachedUserDataRepository

    runner = make_runner()
    uni_id = partition(int(runner.target_user_id))
    await CachedUserDataRepository().get_memory(uni_id)  # creates the user rows
    async with UserDataExecutor(uni_id) as executor:
        await executor.add_session(
            MemoryModel(messages=[Message(role="user", content="我下周要去东京出差")])
        )
    chat_server.set_rule(
        lambda body: None if body.get("tools") else Reply.text("用户下周去东京出差")
    )
    for _ in range(2):
        chat_server.script(
            Reply.tool_call("subconscious_read_sessions", {"limit": 5}),
            stop("看过归档会话"),
        )
        assert (await runner.run_cycle()).outcome == "success"
    summaries = [r for r in chat_server.requests if not r.get("tools")]
    assert len(summaries) == 1  # the second cycle used the cached summary
    sessions = [
        request_tool_results(r)[0]
        for r in loop_requests(chat_server)
        if len(request_tool_results(r)) == 1
    ]
    assert len(sessions) == 2
    for result in sessions:
        assert result["total"] == 1
        assert result["sessions"][0]["summary"] == "用户下周去东京出差"
        assert result["sessions"][0]["messages"] == 1


# ---------------------------------------------------------------------------
# Core settings, runaway protection, extension point
# ---------------------------------------------------------------------------


async def test_loop_config_is_a_deep_copy_with_the_loop_settings(
    make_runner: Callable[..., Any],
) -> None:
    from amrita_core import get_config

    runner = make_runner(max_iterations=7, loop_detect_threshold=2)
    before = get_config().model_dump()
    config = runner.data.loop_config()
    assert config.function_config.agent_tool_call_limit == 7
    assert config.builtin.loop_reasoning_trigger == 2
    assert config.builtin.tool_calling_mode == "agent"
    assert config.builtin is not get_config().builtin
    assert get_config().model_dump() == before  # the chat's config is untouched


async def test_repeated_calls_are_cut_and_the_budget_ends_the_cycle(
    chat_server: ChatServer, make_runner: Callable[..., Any], logs: list[str]
) -> None:
    runner = make_runner(max_iterations=4, loop_detect_threshold=2)
    chat_server.set_rule(
        lambda body: (
            Reply.tool_call("subconscious_get_memory_stats", {}) if body.get("tools") else None
        )
    )
    result = await runner.run_cycle()
    assert result.outcome == "success"
    requests = loop_requests(chat_server)
    # The round budget, the round that hits it, Core's refusal rounds, the closing round.
    assert 4 <= len(requests) <= 4 + 1 + 2 + 1
    executed = [line for line in logs if "subconscious_get_memory_stats → ok" in line]
    assert len(executed) == 1  # the 2nd identical call onwards is cancelled by Core
    contents = [m["content"] for m in requests[-1]["messages"] if m["role"] == "tool"]
    assert any(c.startswith("Cancelled") for c in contents)


def test_duplicate_groups_are_transitive_and_sorted() -> None:
    from amrita_plugin_memory.core.calendar import OwnerCalendar
    from amrita_plugin_memory.core.records import MemoryRecord
    from amrita_plugin_memory.subconscious.toolsets.memory import find_duplicate_groups

    texts = {"a": "用户养了一只猫", "b": "用户养了一只猫", "c": "用户养了一只猫",
             "d": "用户喜欢跑步", "e": "用户很喜欢跑步"}  # fmt: skip

    def rec(i: str, distance: float | None = None) -> MemoryRecord:
        return MemoryRecord(id=i, content=texts[i], partition="p", scope="user", distance=distance)

    records = [rec(i) for i in "abcde"]
    neighbours = {
        "a": [rec("a", 0.0), rec("b", 0.1)],
        "b": [rec("b", 0.0), rec("a", 0.1), rec("c", 0.3)],
        "c": [rec("c", 0.0), rec("b", 0.3)],
        "d": [rec("d", 0.0), rec("e", 0.2), rec("a", 0.9)],
        "e": [rec("e", 0.0), rec("d", 0.2)],
    }
    groups = find_duplicate_groups(records, neighbours, 0.35, calendar=OwnerCalendar())
    assert [[m["id"] for m in g["memories"]] for g in groups] == [["a", "b", "c"], ["d", "e"]]
    assert [g["min_distance"] for g in groups] == [0.1, 0.2]
    assert find_duplicate_groups(records, neighbours, 0.05, calendar=OwnerCalendar()) == []
    # The notion write_memory merges by: close vectors that give another value are no pair...
    texts["e"] = "用户喜欢游泳"
    records = [rec(i) for i in "abcde"]
    neighbours = {k: [rec(h.id, h.distance) for h in v] for k, v in neighbours.items()}
    groups = find_duplicate_groups(records, neighbours, 0.35, calendar=OwnerCalendar())
    assert [[m["id"] for m in g["memories"]] for g in groups] == [["a", "b", "c"]]
    # ...nor is the same text written in private and in a group (or in two groups).
    origins = {"a": "private", "b": "group:1", "c": "group:2"}
    records = [dataclasses.replace(r, origin=origins.get(r.id, "private")) for r in records]
    by_id = {r.id: r for r in records}
    neighbours = {
        k: [dataclasses.replace(by_id[h.id], distance=h.distance) for h in v]
        for k, v in neighbours.items()
    }
    assert find_duplicate_groups(records, neighbours, 0.35, calendar=OwnerCalendar()) == []


async def test_more_tool_groups_plug_in(
    chat_server: ChatServer, make_runner: Callable[..., Any]
) -> None:
    """The next issue's knowledge base and profile come as tool groups like this one."""
    from amrita_core import ToolsManager

    from amrita_plugin_memory.subconscious.toolsets.base import LoopTool
    from amrita_plugin_memory.tools.schemas import define, prop

    runner = make_runner(enable_knowledge=False)  # the real knowledge group owns these names
    seen: list[dict[str, Any]] = []

    async def knowledge_list(args: Any, ctx: Any) -> dict[str, Any]:
        seen.append(dict(args))
        return {"ok": True, "entries": []}

    class KnowledgeGroup:
        name = "knowledge"

        def tools(self) -> list[LoopTool]:
            schema = define(
                "subconscious_knowledge_list", "列出知识条目", {"q": prop("string", "q")}, []
            )
            return [LoopTool(schema, knowledge_list)]

        async def prompt_section(self) -> str:
            return runner.render_guide("prompt_knowledge_file")

    runner.add_tool_group(KnowledgeGroup())
    chat_server.script(
        Reply.tool_call("subconscious_knowledge_list", {"q": "x"}),
        Reply.tool_call("subconscious_iter_stop", {"summary": "看了知识库"}),
    )
    assert (await runner.run_cycle()).outcome == "success"
    assert seen == [{"q": "x"}]
    request = loop_requests(chat_server)[0]
    assert "subconscious_knowledge_list" in offered(request)
    assert "全局知识库使用指南" in request["messages"][0]["content"]
    assert f"关于用户 {runner.target_user_id} 本人的事实" in request["messages"][0]["content"]
    assert not ToolsManager().has_tool("subconscious_knowledge_list")
