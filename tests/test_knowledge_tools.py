"""L3 knowledge base and user profile: loop tools in scripted cycles, the chat LLM's
knowledge tools in real chat turns, the suggestion queue, and the disabled cases.

Every test builds its own runner (own state row, data directory, templates and
knowledge collection) from the session runtime and removes everything it
registered afterwards, so the global ``knowledge_*`` tools never leak into
other tests' chat turns.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.chat import BotRecorder, make_bot, offered, request_tool_results, run_turn
from tests.events import group_event, private_event
from tests.helpers import chat_requests, runtime, runtime_with
from tests.servers import ChatServer, EmbeddingServer, Reply
from tests.test_knowledge import assert_in_step

_users = iter(range(33001, 33999))

SURFACE_NAMES = {"knowledge_list", "knowledge_read", "knowledge_search", "knowledge_suggest"}
KNOWLEDGE_LOOP_TOOLS = {
    "subconscious_knowledge_list",
    "subconscious_knowledge_read",
    "subconscious_knowledge_create",
    "subconscious_knowledge_update",
    "subconscious_knowledge_delete",
    "subconscious_knowledge_search",
    "subconscious_read_suggestions",
}
PROFILE_LOOP_TOOLS = {"subconscious_get_profile", "subconscious_update_profile"}

pytestmark = pytest.mark.usefixtures("whole_replies")


def loop_requests(server: ChatServer) -> list[dict[str, Any]]:
    return [
        r
        for r in server.requests
        if any(t["function"]["name"].startswith("subconscious_") for t in r.get("tools") or [])
    ]


def stop(summary: str = "完成") -> Reply:
    return Reply.tool_call("subconscious_iter_stop", {"summary": summary})


def call(name: str, **args: Any) -> Reply:
    return Reply.tool_call(name, args)


@pytest.fixture
def fail_fast_embedding() -> Any:
    """No retries with backoff when the embedding server fails on purpose."""
    embedder = runtime().embedder
    saved = embedder.max_retries
    embedder.max_retries = 0
    yield
    embedder.max_retries = saved


@pytest.fixture
async def make_runner(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    """Runners on their own data dir and knowledge collection; all removed afterwards."""
    from amrita_plugin_memory.adapters.knowledge_surface import SURFACE
    from amrita_plugin_memory.subconscious import create_runner

    runners: list[Any] = []
    collections: set[str] = set()

    def make(
        uid: int | None = None,
        *,
        state_uid: str | None = None,
        data_dir: Path | None = None,
        surface: bool = False,
        **overrides: Any,
    ) -> Any:
        rt = runtime()
        uid = uid or next(_users)
        overrides.setdefault("knowledge_collection_name", f"kbt-{uuid.uuid4().hex[:12]}")
        collections.add(overrides["knowledge_collection_name"])
        sub = rt.config.file.subconscious.model_copy(
            update={"enabled": True, "target_user_id": str(uid), **overrides}
        )
        runner = create_runner(
            rt,
            sub,
            state_uid=state_uid or f"test-{uuid.uuid4().hex[:12]}",
            config_dir=tmp_path / "config",
            data_dir=data_dir or tmp_path / "data",
        )
        if surface:
            SURFACE.bind(runner)
        runners.append(runner)
        return runner

    yield make
    for runner in runners:
        SURFACE.unbind(runner)
        await runner.shutdown()
    existing = await runtime().connection.list_collections()
    for name in collections & set(existing):
        await runtime().connection.delete_collection(name)


# ---------------------------------------------------------------------------
# Knowledge base through the loop's tools
# ---------------------------------------------------------------------------


async def test_loop_creates_updates_deletes_knowledge_in_step(
    chat_server: ChatServer, make_runner: Callable[..., Any]
) -> None:
    runner = make_runner()
    kb = runner.knowledge
    assert kb is not None

    # Cycle 1: create (one bad call first), then list.
    chat_server.script(
        call("subconscious_knowledge_create", title="", summary="s", body="b"),
        call(
            "subconscious_knowledge_create",
            title="用 uv 管理 Python 依赖",
            summary="uv 创建虚拟环境并按锁文件安装依赖",
            body="1. uv venv\n2. uv sync --frozen\n3. uv run pytest",
        ),
        call("subconscious_knowledge_list"),
        stop("新建了一条知识"),
    )
    first = await runner.run_cycle()
    assert first.outcome == "success" and first.actions == {"knowledge_create": 1}
    requests = loop_requests(chat_server)
    assert KNOWLEDGE_LOOP_TOOLS | PROFILE_LOOP_TOOLS <= offered(requests[0])
    system = requests[0]["messages"][0]["content"]
    assert "全局知识库使用指南" in system and "知识库现有 0 条；待审查的知识建议 0 条" in system
    assert "用户画像构建指南" in system and "当前画像为空" in system
    bad, created, listed = request_tool_results(requests[-1])
    assert bad["ok"] is False and "title" in bad["error"]
    assert created["ok"] is True
    kid = created["entry"]["kid"]
    assert listed["total"] == 1 and listed["entries"][0]["kid"] == kid
    await assert_in_step(kb)

    # Cycle 2: read a window, update the body, search; bad calls are clear errors.
    chat_server.clear()
    chat_server.script(
        call("subconscious_knowledge_read", kid=kid, start_line=2, end_line=2),
        call("subconscious_knowledge_read", kid=kid, start_line=9),
        call("subconscious_knowledge_read", kid="abcdef123456"),
        call("subconscious_knowledge_update", kid=kid),
        call(
            "subconscious_knowledge_update",
            kid=kid,
            body="1. uv venv\n2. uv sync --frozen\n3. uv run pytest\n4. uv lock --upgrade 升级依赖",
        ),
        call("subconscious_knowledge_search", query="升级依赖 uv lock", top_k=3),
        stop("补充了升级依赖的方法"),
    )
    second = await runner.run_cycle()
    assert second.outcome == "success" and second.actions == {"knowledge_update": 1}
    requests = loop_requests(chat_server)
    assert "知识库现有 1 条" in requests[0]["messages"][0]["content"]
    window, beyond, missing, empty_update, updated, hits = request_tool_results(requests[-1])
    assert window["lines"] == ["2: 2. uv sync --frozen"] and window["total_lines"] == 3
    assert "start_line=3" in window["more"]
    assert beyond["ok"] is True and beyond["lines"] == [] and "超出范围" in beyond["more"]
    assert missing["ok"] is False and "不存在" in missing["error"]
    assert empty_update["ok"] is False and "至少提供" in empty_update["error"]
    assert updated["ok"] is True
    assert hits["results"][0]["kid"] == kid
    assert "uv lock --upgrade" in (await kb.get(kid)).body
    await assert_in_step(kb)

    # Cycle 3: delete; deleting again is a clear error.
    chat_server.clear()
    chat_server.script(
        call("subconscious_knowledge_delete", kid=kid),
        call("subconscious_knowledge_delete", kid=kid),
        call("subconscious_knowledge_search", query="uv"),
        stop("删除了过时的知识"),
    )
    third = await runner.run_cycle()
    assert third.outcome == "success" and third.actions == {"knowledge_delete": 1}
    deleted, again, search = request_tool_results(loop_requests(chat_server)[-1])
    assert deleted == {"ok": True, "deleted": kid}
    assert again["ok"] is False and "不存在" in again["error"]
    assert search["results"] == []
    await assert_in_step(kb)
    assert await kb.list() == []
    abstract = runner.state["last_abstracts"][-1]
    assert abstract["summary"] == "删除了过时的知识"


async def test_embedding_down_during_a_cycle_keeps_the_entry(
    chat_server: ChatServer,
    embed_server: EmbeddingServer,
    make_runner: Callable[..., Any],
    fail_fast_embedding: None,
) -> None:
    """Issue #47: the loop's knowledge is text first; an outage costs its vector only
    (found by keywords, embedded by the next start-up validation)."""
    runner = make_runner()
    embed_server.set_mode("error500")
    chat_server.script(
        call("subconscious_knowledge_create", title="标题", summary="摘要", body="正文"),
        call("subconscious_knowledge_search", query="摘要 正文"),
        stop(),
    )
    result = await runner.run_cycle()
    embed_server.set_mode("ok")
    assert result.outcome == "success" and result.actions == {"knowledge_create": 1}
    created, found = request_tool_results(loop_requests(chat_server)[-1])
    assert created["ok"] is True
    assert found["results"] and found["results"][0]["title"] == "标题"
    assert runner.knowledge is not None and len(await runner.knowledge.list()) == 1


async def test_validate_on_startup_runs_at_runner_start(
    tmp_path: Path,
    embed_server: EmbeddingServer,
    make_runner: Callable[..., Any],
    logs: list[str],
    fail_fast_embedding: None,
) -> None:
    data = tmp_path / "shared-data"
    collection = f"kbt-{uuid.uuid4().hex[:12]}"
    first = make_runner(data_dir=data, knowledge_collection_name=collection)
    kb = first.knowledge
    a = await kb.create("A", "a", "甲")
    b = await kb.create("B", "b", "乙")
    # Drift: the index is gone, one file was edited by hand.
    kb.index_path.unlink()
    entry = await kb.get(b.kid)
    entry.body = "手工修改的乙"
    kb.path_for(b.kid).write_text(entry.render(), encoding="utf-8")

    runner = make_runner(data_dir=data, knowledge_collection_name=collection)
    await runner.start()
    assert runner.knowledge_validation is not None
    report = await runner.knowledge_validation
    assert report is not None
    assert sorted(report.indexed_files) == sorted([a.kid, b.kid])
    assert report.reembedded == [b.kid]
    await assert_in_step(runner.knowledge)
    assert any("知识库校验修复" in line for line in logs)
    assert any("Knowledge base checked: 2 entries" in line for line in logs)

    # The embedding service down at startup: logged, not fatal.
    entry.body = "又改了一次"
    kb.path_for(b.kid).write_text(entry.render(), encoding="utf-8")
    embed_server.set_mode("error500")
    later = make_runner(data_dir=data, knowledge_collection_name=collection)
    await later.start()
    assert await later.knowledge_validation is None
    embed_server.set_mode("ok")
    assert any(line.startswith("WARNING") and "知识库启动校验失败" in line for line in logs)
    assert later.active


# ---------------------------------------------------------------------------
# The chat LLM's knowledge tools in real chat turns
# ---------------------------------------------------------------------------


async def chat_turn(server: ChatServer, event: Any, *replies: Reply) -> list[dict[str, Any]]:
    """One chat turn; the tool results of this turn, in order."""
    server.clear()
    server.script(*replies)
    await run_turn(make_bot(BotRecorder()), event)
    requests = chat_requests(server)
    assert requests
    seen: dict[str, dict[str, Any]] = {}
    history = {m.get("tool_call_id") for m in requests[0]["messages"]}
    for request in requests:
        for message in request["messages"]:
            call_id = message.get("tool_call_id")
            if message["role"] == "tool" and call_id not in seen and call_id not in history:
                seen[call_id] = json.loads(message["content"])
    return list(seen.values())


async def test_surface_tools_in_chat_turns(
    chat_server: ChatServer, make_runner: Callable[..., Any]
) -> None:
    from amrita_core import ToolsManager

    # Suggestions from anyone here; who may suggest by default: tests/test_permissions.py.
    runner = make_runner(surface=True, knowledge_suggest_from="anyone")
    await runner.start()
    await runner.knowledge_validation
    entry = await runner.knowledge.create(
        "用 uv 管理 Python 依赖", "uv 创建虚拟环境并安装依赖", "1. uv venv\n2. uv sync"
    )
    assert SURFACE_NAMES <= set(ToolsManager().tools_meta())

    uid = next(_users)
    results = await chat_turn(
        chat_server,
        private_event(uid, "python 依赖怎么装？"),
        call("knowledge_list"),
        call("knowledge_search", query="Python 依赖安装", top_k=2),
        call("knowledge_read", kid=entry.kid, start_line=2),
        call("knowledge_read", kid="../../etc/passwd"),
        call(
            "knowledge_suggest",
            action="create",
            title="pip 镜像加速",
            summary="国内安装慢时配置镜像源",
            body="pip config set global.index-url https://mirrors.example/simple",
            reason="用户反馈安装很慢，配置镜像后解决",
        ),
        Reply.text("用 uv sync 即可"),
    )
    assert SURFACE_NAMES <= offered(chat_requests(chat_server)[0])
    listed, hits, window, bad, suggested = results
    assert listed["total"] == 1 and listed["entries"][0]["kid"] == entry.kid
    assert hits["results"][0]["kid"] == entry.kid
    assert window["lines"] == ["2: 2. uv sync"]
    assert bad["ok"] is False and "格式无效" in bad["error"]
    assert suggested["ok"] is True and suggested["queued"] is True
    queued = runner.state["knowledge_suggestions"]
    assert [s["title"] for s in queued] == ["pip 镜像加速"]
    assert queued[0]["source"] == f"QQPlatform_Private_{uid}" and "kid" not in queued[0]
    stored = await runner.state_store.load()
    assert stored["knowledge_suggestions"] == queued

    # From a group chat: an update suggestion for an existing entry.
    results = await chat_turn(
        chat_server,
        group_event(uid, 23001, "uv 还能升级依赖"),
        call(
            "knowledge_suggest",
            action="update",
            kid=entry.kid,
            title="用 uv 管理 Python 依赖",
            body="1. uv venv\n2. uv sync\n3. uv lock --upgrade",
            reason="补充升级依赖的方法",
        ),
        call("knowledge_suggest", action="update", title="缺 kid", reason="x"),
        Reply.text("已提交建议"),
    )
    update, missing_kid = results
    assert update["ok"] is True
    assert missing_kid["ok"] is False and "kid" in missing_kid["error"]
    assert runner.state["knowledge_suggestions"][-1]["source"] == "QQPlatform_Group_23001"
    assert runner.state["knowledge_suggestions"][-1]["kid"] == entry.kid
    # The chat LLM cannot write the knowledge base itself.
    assert (await runner.knowledge.get(entry.kid)).body == "1. uv venv\n2. uv sync"

    # A stopped runner: the tools are no longer offered.
    await runner.shutdown()
    assert not SURFACE_NAMES & set(ToolsManager().tools_meta())
    await chat_turn(chat_server, private_event(uid, "在吗"), Reply.text("在"))
    for request in chat_requests(chat_server):
        assert not SURFACE_NAMES & offered(request)


# ---------------------------------------------------------------------------
# The suggestion queue
# ---------------------------------------------------------------------------


def suggestion(i: int) -> dict[str, Any]:
    return {
        "action": "create",
        "title": f"经验 {i}",
        "summary": f"第 {i} 条经验",
        "body": f"正文 {i}",
        "reason": "对话中验证过",
    }


async def test_suggestion_queue_bounds_and_persistence(
    make_runner: Callable[..., Any], logs: list[str]
) -> None:
    from amrita_plugin_memory.subconscious.toolsets.suggestions import SUGGESTIONS_MAX

    state_uid = f"test-{uuid.uuid4().hex[:12]}"
    runner = make_runner(state_uid=state_uid, knowledge_max_chars=300)
    tools = runner.suggestions
    entry = await runner.knowledge.create("已有条目", "摘要", "正文")

    async def suggest(**args: Any) -> dict[str, Any]:
        return await tools.suggest(
            args, source="QQPlatform_Private_1", user_id=runner.target_user_id
        )

    bad = {
        "的值 'merge' 无效": {**suggestion(0), "action": "merge"},
        "需要 title、summary、body": {**suggestion(0), "body": None},
        "参数 reason 不能为空": {**suggestion(0), "reason": "  "},
        "参数 title 不能为空": {**suggestion(0), "title": ""},
        "过长（101 字": {**suggestion(0), "title": "长" * 101},
        "过长（301 字，上限 300 字）": {**suggestion(0), "body": "长" * 301},
        "缺少参数 kid": {**suggestion(0), "action": "delete"},
        "不存在": {**suggestion(0), "action": "update", "kid": "abcdef123456"},
        "格式无效": {**suggestion(0), "action": "update", "kid": ["x"]},
    }
    for message, args in bad.items():
        result = await suggest(**args)
        assert result["ok"] is False and message in result["error"], (message, result)
    assert runner.state["knowledge_suggestions"] == []

    assert (await suggest(**suggestion(0)))["ok"] is True
    duplicate = await suggest(**suggestion(0))
    assert duplicate["ok"] is False and "相同的建议" in duplicate["error"]
    delete = await suggest(
        action="delete", kid=entry.kid, title="已有条目", body="忽略", reason="已过时"
    )
    assert delete["ok"] is True
    assert runner.state["knowledge_suggestions"][-1].get("body") is None  # not kept for delete
    for i in range(1, SUGGESTIONS_MAX + 1):
        assert (await suggest(**suggestion(i)))["ok"] is True
    queue = runner.state["knowledge_suggestions"]
    assert len(queue) == SUGGESTIONS_MAX
    assert [s["title"] for s in queue] == [f"经验 {i}" for i in range(1, SUGGESTIONS_MAX + 1)]
    dropped = [line for line in logs if "dropped the oldest" in line]
    assert len(dropped) == 2 and all(line.startswith("WARNING [Subconscious]") for line in dropped)
    assert "经验 0" in dropped[0] and "已有条目" in dropped[1]

    # Persisted: a new process sees the same queue …
    stored = await runner.state_store.load()
    assert stored["knowledge_suggestions"] == queue
    await runner.shutdown()
    later = make_runner(int(runner.target_user_id), state_uid=state_uid)
    # … and a suggestion before the state was ever loaded does not wipe the row.
    suggested = await later.suggestions.suggest(
        suggestion(99), source="s", user_id=later.target_user_id
    )
    assert suggested["ok"] is True
    titles = [s["title"] for s in (await later.state_store.load())["knowledge_suggestions"]]
    assert len(titles) == SUGGESTIONS_MAX and titles[0] == "经验 2" and titles[-1] == "经验 99"


def blocking_rule(
    replies: list[Reply], block_at: int
) -> tuple[Callable[[dict[str, Any]], Reply | None], threading.Event, threading.Event]:
    """Serve the loop ``replies`` in order, holding request ``block_at`` until released."""
    started, release = threading.Event(), threading.Event()
    served: list[int] = []

    def rule(body: dict[str, Any]) -> Reply | None:
        if not any(
            t["function"]["name"].startswith("subconscious_") for t in body.get("tools") or []
        ):
            return None
        index = len(served)
        served.append(index)
        if index == block_at:
            started.set()
            release.wait(20)
        return replies[index] if index < len(replies) else Reply.text("好的")

    return rule, started, release


async def test_suggestions_cleared_only_by_a_successful_cycle_that_read_them(
    chat_server: ChatServer, make_runner: Callable[..., Any], no_retries: None
) -> None:
    runner = make_runner()
    for i in range(3):
        assert (
            await runner.suggestions.suggest(
                suggestion(i), source="s", user_id=runner.target_user_id
            )
        )["ok"]
    ids = [s["id"] for s in runner.state["knowledge_suggestions"]]

    async def stored_ids() -> list[str]:
        return [s["id"] for s in (await runner.state_store.load())["knowledge_suggestions"]]

    # Failed after reading: nothing lost.
    chat_server.script(call("subconscious_read_suggestions"))
    chat_server.set_mode("error500", after=1)
    failed = await runner.run_cycle()
    chat_server.set_mode("ok")
    assert failed.outcome == "failed"
    assert [s["id"] for s in runner.state["knowledge_suggestions"]] == ids
    assert await stored_ids() == ids

    # Interrupted by the user after reading: nothing lost.
    chat_server.clear()
    rule, started, release = blocking_rule(
        [call("subconscious_read_suggestions"), stop("看过建议")], block_at=1
    )
    chat_server.set_rule(rule)
    task = asyncio.create_task(runner.run_cycle())
    assert await asyncio.to_thread(started.wait, 10)
    runner.on_target_message()
    release.set()
    interrupted = await asyncio.wait_for(task, 20)
    assert interrupted.outcome == "interrupted"
    assert await stored_ids() == ids

    # Success without reading: nothing cleared.
    chat_server.clear()
    chat_server.script(stop("没看建议"))
    assert (await runner.run_cycle()).outcome == "success"
    assert await stored_ids() == ids

    # Success after reading the first two (one page): exactly those are cleared.
    chat_server.clear()
    chat_server.script(call("subconscious_read_suggestions", limit=2), stop("审阅了两条建议"))
    ok = await runner.run_cycle()
    assert ok.outcome == "success"
    requests = loop_requests(chat_server)
    assert (
        "待审查的知识建议 3 条，请用 subconscious_read_suggestions 审阅"
        in (requests[0]["messages"][0]["content"])
    )
    (page,) = request_tool_results(requests[-1])
    assert [s["id"] for s in page["suggestions"]] == ids[:2]
    assert page["total"] == 3 and "offset=2" in page["more"] and "线索" in page["note"]
    assert await stored_ids() == ids[2:]
    assert [s["id"] for s in runner.state["knowledge_suggestions"]] == ids[2:]


# ---------------------------------------------------------------------------
# User profile through the loop's tools
# ---------------------------------------------------------------------------


async def test_profile_tools_in_a_cycle(
    chat_server: ChatServer, make_runner: Callable[..., Any]
) -> None:
    runner = make_runner(max_iterations=20)
    chat_server.script(
        call("subconscious_get_profile"),
        call("subconscious_update_profile", operation="insert", start_line=2, content="x"),
        call(
            "subconscious_update_profile",
            operation="insert",
            start_line=1,
            content="## 基本情况\n---\n住在杭州",
        ),
        call(
            "subconscious_update_profile",
            operation="insert",
            section="summary",
            start_line=1,
            content="一位住在杭州的程序员",
        ),
        call("subconscious_update_profile", operation="replace", start_line=3, content="住在上海"),
        call("subconscious_update_profile", operation="replace", start_line=9, content="x"),
        call("subconscious_update_profile", operation="delete", start_line=2, end_line=1),
        call("subconscious_update_profile", operation="insert", start_line=1),
        call("subconscious_update_profile", operation="rewrite", start_line=1, content="x"),
        call("subconscious_get_profile", section="body", start_line=2, end_line=2),
        call("subconscious_get_profile", section="body", start_line=10),
        call("subconscious_get_profile"),
        stop("开始构建画像"),
    )
    result = await runner.run_cycle()
    assert result.outcome == "success" and result.actions == {"profile": 3}
    requests = loop_requests(chat_server)
    assert "当前画像为空" in requests[0]["messages"][0]["content"]
    (
        empty,
        beyond_insert,
        inserted,
        summary,
        replaced,
        beyond_replace,
        reversed_range,
        no_content,
        bad_operation,
        window,
        beyond_read,
        whole,
    ) = request_tool_results(requests[-1])
    assert empty["ok"] is True and empty["body"]["lines"] == [] and "画像为空" in empty["note"]
    assert beyond_insert["ok"] is False and "超出范围" in beyond_insert["error"]
    assert inserted == {"ok": True, "section": "body", "total_lines": 3}
    assert summary["ok"] is True and replaced["ok"] is True
    assert beyond_replace["ok"] is False and "超出范围" in beyond_replace["error"]
    assert reversed_range["ok"] is False and "≥ start_line" in reversed_range["error"]
    assert no_content["ok"] is False and "content" in no_content["error"]
    assert bad_operation["raw"].startswith("ERR:")  # Core's enum check
    assert window["lines"] == ["2: ---"] and "start_line=3" in window["more"]
    assert beyond_read["lines"] == [] and "超出范围" in beyond_read["more"]
    assert whole["summary"]["lines"] == ["1: 一位住在杭州的程序员"]
    assert whole["body"]["lines"] == ["1: ## 基本情况", "2: ---", "3: 住在上海"]
    # The "---" inside the body cannot corrupt the summary---body file.
    text = runner.profile.path.read_text(encoding="utf-8")
    assert text == "一位住在杭州的程序员\n---\n## 基本情况\n\\---\n住在上海\n"

    chat_server.clear()
    chat_server.script(stop())
    await runner.run_cycle()
    assert (
        "当前画像：摘要 1 行，正文 3 行" in loop_requests(chat_server)[0]["messages"][0]["content"]
    )


# ---------------------------------------------------------------------------
# Knowledge base disabled
# ---------------------------------------------------------------------------


def knowledge_on_disk(data: Path) -> list[str]:
    return sorted(p.name for p in data.glob("*") if p.name in ("knowledge", "knowledge_index.json"))


async def test_disabled_knowledge_offers_nothing_and_creates_nothing(
    tmp_path: Path, chat_server: ChatServer, make_runner: Callable[..., Any]
) -> None:
    from amrita_core import ToolsManager

    from amrita_plugin_memory.adapters.knowledge_surface import SURFACE

    data = tmp_path / "data"
    runner = make_runner(data_dir=data, enable_knowledge=False)
    assert runner.knowledge is None and runner.knowledge_tools is None
    with pytest.raises(ValueError, match="no knowledge base"):
        SURFACE.bind(runner)
    await runner.start()
    assert runner.knowledge_validation is None
    chat_server.script(stop("无事"))
    assert (await runner.run_cycle()).outcome == "success"
    request = loop_requests(chat_server)[0]
    assert not KNOWLEDGE_LOOP_TOOLS & offered(request)
    assert PROFILE_LOOP_TOOLS <= offered(request)
    system = request["messages"][0]["content"]
    assert "全局知识库使用指南" not in system and "用户画像构建指南" in system

    await chat_turn(
        chat_server, private_event(int(runner.target_user_id), "你好"), Reply.text("你好")
    )
    for r in chat_requests(chat_server):
        assert not SURFACE_NAMES & offered(r)
    assert not SURFACE_NAMES & set(ToolsManager().tools_meta())
    assert knowledge_on_disk(data) == []
    collections = await runtime().connection.list_collections()
    assert runner.config.knowledge_collection_name not in collections


@pytest.fixture
async def setup_l3() -> AsyncIterator[Callable[[Any], Any]]:
    """``setup_subconscious`` with every driver hook and runner removed afterwards."""
    import nonebot

    from amrita_plugin_memory.adapters.subconscious import setup_subconscious

    lifespan = nonebot.get_driver()._lifespan  # type: ignore[attr-defined]
    startup, shutdown = list(lifespan._startup_funcs), list(lifespan._shutdown_funcs)
    runners: list[Any] = []

    def setup(rt: Any) -> Any:
        runner = setup_subconscious(rt)
        if runner is not None:
            runners.append(runner)
        return runner

    yield setup
    new_shutdown = [f for f in lifespan._shutdown_funcs if f not in shutdown]
    for stop_hook in new_shutdown:
        await stop_hook()
    lifespan._startup_funcs[:] = [f for f in lifespan._startup_funcs if f in startup]
    lifespan._shutdown_funcs[:] = [f for f in lifespan._shutdown_funcs if f in shutdown]
    for runner in runners:
        await runner.shutdown()


@pytest.mark.parametrize(
    "sub",
    [
        {"enabled": False, "target_user_id": "33998"},
        {"enabled": True, "target_user_id": "33998", "enable_knowledge": False},
    ],
)
async def test_setup_without_knowledge_offers_nothing(
    tmp_path: Path, chat_server: ChatServer, setup_l3: Callable[[Any], Any], sub: dict[str, Any]
) -> None:
    from amrita_core import ToolsManager

    rt = runtime_with(
        tmp_path, own_data_dir=True, knowledge_collection_name=f"kbt-{uuid.uuid4().hex[:12]}", **sub
    )
    runner = setup_l3(rt)
    assert (runner is None) is (not sub["enabled"])
    if runner is not None:
        await runner.start()
        assert runner.knowledge_validation is None
    assert not SURFACE_NAMES & set(ToolsManager().tools_meta())
    await chat_turn(chat_server, private_event(33997, "你好"), Reply.text("你好"))
    for request in chat_requests(chat_server):
        assert not SURFACE_NAMES & offered(request)
    assert knowledge_on_disk(rt.config.data_dir) == []
    name = rt.config.file.subconscious.knowledge_collection_name
    assert name not in await runtime().connection.list_collections()


async def test_setup_with_knowledge_offers_the_tools_while_running(
    tmp_path: Path, chat_server: ChatServer, setup_l3: Callable[[Any], Any]
) -> None:
    import nonebot
    from amrita_core import ToolsManager

    collection = f"kbt-{uuid.uuid4().hex[:12]}"
    rt = runtime_with(
        tmp_path, enabled=True, target_user_id="33996", knowledge_collection_name=collection
    )
    runner = setup_l3(rt)
    assert runner is not None and runner.knowledge is not None
    # The driver startup hook starts the runner, which checks the knowledge base.
    lifespan = nonebot.get_driver()._lifespan  # type: ignore[attr-defined]
    assert runner.start in lifespan._startup_funcs
    await runner.start()
    await runner.knowledge_validation
    assert knowledge_on_disk(rt.config.data_dir) == ["knowledge"]
    await chat_turn(
        chat_server,
        private_event(33995, "有什么经验？"),
        call("knowledge_list"),
        Reply.text("没有"),
    )
    requests = chat_requests(chat_server)
    assert SURFACE_NAMES <= offered(requests[0])
    (listed,) = [r for r in request_tool_results(requests[-1])]
    assert listed == {"ok": True, "total": 0, "offset": 0, "entries": [], "note": "知识库为空"}

    # A second setup in the same process (e.g. a reload) does not register twice.
    second = setup_l3(
        runtime_with(
            tmp_path / "b",
            enabled=True,
            target_user_id="33994",
            knowledge_collection_name=collection,
        )
    )
    assert second is not None
    assert sorted(n for n in ToolsManager().tools_meta() if n in SURFACE_NAMES) == sorted(
        SURFACE_NAMES
    )
    for hook in [f for f in lifespan._shutdown_funcs][-2:]:
        await hook()
    assert not SURFACE_NAMES & set(ToolsManager().tools_meta())
    await runtime().connection.delete_collection(collection)
