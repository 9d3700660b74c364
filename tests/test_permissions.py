"""Who may steer shared state: ``knowledge_suggest`` and the group memo / group memories.

* ``knowledge_suggest`` feeds the L3 loop, which reads the target user's private
  chat, profile and memories and writes the global knowledge base: by default
  (``[subconscious] knowledge_suggest_from = "target"``) only the target user and
  NoneBot's superusers may suggest; ``"anyone"`` opens it to everyone.
* ``group_memo_editors = "admin"`` limits the group memo (``update_memo`` in a
  group) and new group memories (``write_memory(scope=group)``) to the group's
  admins, its owner and superusers; ``"member"`` (default) is the spec's behaviour.

Permissions are resolved the real way: chat turns through NoneBot + OneBot V11 +
Amrita with the scripted model, and callers built from OneBot events whose
sender role the recording bot answers (``get_group_member_info``).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.chat import BotRecorder, make_bot, tool_results, turn
from tests.conftest import SUPERUSER
from tests.events import group_event, private_event
from tests.helpers import runtime, view_of
from tests.reliability_stats import STATS
from tests.servers import ChatServer, Reply

_users = iter(range(35001, 35999))

pytestmark = pytest.mark.usefixtures("whole_replies")


# ---------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------


def test_new_keys_default_render_and_name_the_key_when_bad(tmp_path: Path) -> None:
    from amrita_plugin_memory.core.config import (
        ConfigError,
        ConfigFile,
        load_config_file,
        render_config_toml,
    )

    defaults = ConfigFile()
    assert defaults.group_memo_editors == "member"
    assert defaults.subconscious.knowledge_suggest_from == "target"
    rendered = render_config_toml()
    assert 'group_memo_editors = "member"' in rendered
    assert 'knowledge_suggest_from = "target"' in rendered

    path = tmp_path / "config.toml"
    path.write_text(
        'group_memo_editors = "admin"\n[subconscious]\nknowledge_suggest_from = "anyone"\n',
        encoding="utf-8",
    )
    loaded = load_config_file(path, warn=lambda _: None)
    assert loaded.group_memo_editors == "admin"
    assert loaded.subconscious.knowledge_suggest_from == "anyone"

    for text, key in (
        (
            '[subconscious]\nknowledge_suggest_from = "everyone"\n',
            "subconscious.knowledge_suggest_from",
        ),
        ('group_memo_editors = "owner"\n', "group_memo_editors"),
        ("group_memo_editors = 1\n", "group_memo_editors"),
    ):
        path.write_text(text, encoding="utf-8")
        STATS.inputs_tried += 1
        with pytest.raises(ConfigError) as err:
            load_config_file(path, warn=lambda _: None)
        assert f"配置项 {key} 的值" in str(err.value), str(err.value)


# ---------------------------------------------------------------------------
# knowledge_suggest: the target user and superusers only, by default
# ---------------------------------------------------------------------------


@pytest.fixture
async def make_runner(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    """Runners whose knowledge tools are offered to the chat LLM; all removed afterwards."""
    from amrita_plugin_memory.adapters.knowledge_surface import SURFACE
    from amrita_plugin_memory.subconscious import create_runner

    runners: list[Any] = []

    def make(**overrides: Any) -> Any:
        rt = runtime()
        overrides.setdefault("knowledge_collection_name", f"kbp-{uuid.uuid4().hex[:12]}")
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
        SURFACE.bind(runner)
        runners.append(runner)
        return runner

    yield make
    for runner in runners:
        SURFACE.unbind(runner)
        await runner.shutdown()
    existing = set(await runtime().connection.list_collections())
    for runner in runners:
        if runner.config.knowledge_collection_name in existing:
            await runtime().connection.delete_collection(runner.config.knowledge_collection_name)


async def suggest_in_turn(server: ChatServer, event: Any, title: str) -> dict[str, Any]:
    """One chat turn in which the model calls ``knowledge_suggest``; its result."""
    await turn(
        server,
        event,
        Reply.tool_call(
            "knowledge_suggest",
            {
                "action": "create",
                "title": title,
                "summary": f"{title}的做法",
                "body": f"1. {title}\n2. 验证",
                "reason": "对话中验证过",
            },
        ),
        Reply.text("好的"),
    )
    (result,) = tool_results(server)
    return result


async def test_knowledge_suggest_only_from_target_or_superuser_by_default(
    chat_server: ChatServer, make_runner: Callable[..., Any]
) -> None:
    runner = make_runner()
    assert runner.config.knowledge_suggest_from == "target"
    target, other, gid = int(runner.target_user_id), next(_users), 25301

    for event in (
        private_event(other, "帮我记一条经验"),
        group_event(other, gid, "把这条写进知识库"),
        group_event(other, gid, "我是管理员，写进知识库", role="admin"),
    ):
        STATS.inputs_tried += 1
        refused = await suggest_in_turn(chat_server, event, "别人的建议")
        assert refused["ok"] is False and "无权提交" in refused["error"], refused
        assert "queued" not in refused
    assert runner.state["knowledge_suggestions"] == []
    stored = await runner.state_store.load()
    assert stored is None or stored["knowledge_suggestions"] == []  # no row written at all

    accepted = {
        "目标用户私聊": private_event(target, "记一条经验"),
        "目标用户群聊": group_event(target, gid, "记一条经验"),
        "超级用户群聊": group_event(int(SUPERUSER), gid, "记一条经验"),
        "超级用户私聊": private_event(int(SUPERUSER), "记一条经验"),
    }
    for title, event in accepted.items():
        result = await suggest_in_turn(chat_server, event, title)
        assert result["ok"] is True and result["queued"] is True, (title, result)
    queue = runner.state["knowledge_suggestions"]
    assert [s["title"] for s in queue] == list(accepted)
    assert [s["source"] for s in queue] == [
        f"QQPlatform_Private_{target}",
        f"QQPlatform_Group_{gid}",
        f"QQPlatform_Group_{gid}",
        f"QQPlatform_Private_{SUPERUSER}",
    ]
    assert (await runner.state_store.load())["knowledge_suggestions"] == queue


async def test_knowledge_suggest_from_anyone_accepts_everyone(
    chat_server: ChatServer, make_runner: Callable[..., Any]
) -> None:
    runner = make_runner(knowledge_suggest_from="anyone")
    other = next(_users)
    private = await suggest_in_turn(chat_server, private_event(other, "记一条"), "私聊建议")
    group = await suggest_in_turn(chat_server, group_event(other, 25302, "记一条"), "群聊建议")
    assert private["ok"] is True and group["ok"] is True
    assert [s["title"] for s in runner.state["knowledge_suggestions"]] == ["私聊建议", "群聊建议"]


# ---------------------------------------------------------------------------
# group_memo_editors
# ---------------------------------------------------------------------------

ROLES = [("member", 35901), ("admin", 35902), ("owner", 35903), ("member", int(SUPERUSER))]


@pytest.mark.parametrize(("role", "uid"), ROLES)
@pytest.mark.parametrize("editors", ["member", "admin"])
async def test_group_memo_and_group_writes_matrix(editors: str, role: str, uid: int) -> None:
    from amrita_plugin_memory.adapters.events import scope_from_event
    from amrita_plugin_memory.storage.scope import ScopeRules

    rt = runtime()
    tools = rt.tools
    rules = ScopeRules(group_editors=editors)  # type: ignore[arg-type]
    gid = 25400 + ROLES.index((role, uid)) + (10 if editors == "admin" else 0)
    group_partition = f"QQPlatform_Group_{gid}"
    bot = make_bot(BotRecorder(roles={(gid, uid): role}))
    caller = await scope_from_event(bot, group_event(uid, gid, "x", role=role), rules)
    allowed = editors == "member" or role in ("admin", "owner") or str(uid) == SUPERUSER
    STATS.inputs_tried += 2

    memo_before = await rt.memo.get(view_of(group_partition))
    count_before = await rt.store.count(view_of(group_partition))
    memo = await tools.update_memo(caller, {"content": f"群备忘（{editors}/{role}）"})
    write = await tools.write_memory(
        caller, {"content": "本群周五聚餐", "tags": ["活动"], "scope": "group"}
    )
    assert memo["ok"] is allowed and write["ok"] is allowed, (memo, write)
    if allowed:
        assert await rt.memo.get(view_of(group_partition)) == f"群备忘（{editors}/{role}）"
        assert await rt.store.count(view_of(group_partition)) == count_before + 1
    else:
        for result in (memo, write):
            assert (
                "群管理员、群主或超级用户" in result["error"] and "未做任何修改" in result["error"]
            )
        assert await rt.memo.get(view_of(group_partition)) == memo_before
        assert await rt.store.count(view_of(group_partition)) == count_before

    # The speaker's own memories and private memo are never restricted.
    own = await tools.write_memory(caller, {"content": "我喜欢猫", "tags": [], "scope": "user"})
    assert own["ok"] is True
    private = await scope_from_event(bot, private_event(uid, "x"), rules)
    assert (await tools.update_memo(private, {"content": "个人备忘"}))["ok"] is True


async def test_admin_only_group_memo_in_chat_turns(
    chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt = runtime()
    gid, member, admin = 25490, next(_users), next(_users)
    group_partition = f"QQPlatform_Group_{gid}"
    recorder = BotRecorder(roles={(gid, admin): "admin"})

    def edits(memo: str) -> list[Reply]:
        return [
            Reply.tool_call("update_memo", {"content": memo}),
            Reply.tool_call(
                "write_memory",
                {"content": memo, "tags": ["群"], "importance": "medium", "scope": "group"},
            ),
            Reply.text("好的"),
        ]

    # The spec's default: any member may edit.
    assert rt.scopes.group_editors == "member"
    await turn(
        chat_server, group_event(member, gid, "改群备忘"), *edits("成员写的"), recorder=recorder
    )
    assert [r["ok"] for r in tool_results(chat_server)] == [True, True]
    assert await rt.memo.get(view_of(group_partition)) == "成员写的"

    monkeypatch.setattr(rt, "scopes", dataclasses.replace(rt.scopes, group_editors="admin"))
    STATS.inputs_tried += 2
    await turn(
        chat_server, group_event(member, gid, "再改"), *edits("成员又写的"), recorder=recorder
    )
    memo, write = tool_results(chat_server)
    assert memo["ok"] is False and "group_memo_editors" in memo["error"]
    assert write["ok"] is False and "写入群共享记忆" in write["error"]
    assert await rt.memo.get(view_of(group_partition)) == "成员写的"
    assert await rt.store.count(view_of(group_partition)) == 1

    await turn(
        chat_server,
        group_event(admin, gid, "管理员来改", role="admin"),
        *edits("管理员写的"),
        recorder=recorder,
    )
    assert [r["ok"] for r in tool_results(chat_server)] == [True, True]
    assert await rt.memo.get(view_of(group_partition)) == "管理员写的"
    assert await rt.store.count(view_of(group_partition)) == 2


async def test_runtime_hands_the_setting_to_the_tools(tmp_path: Path) -> None:
    from amrita_plugin_memory.services import MemoryRuntime

    rt = runtime()
    file = rt.config.file.model_copy(update={"group_memo_editors": "admin"})
    built = MemoryRuntime(dataclasses.replace(rt.config, file=file, data_dir=tmp_path))
    try:
        assert built.scopes.group_editors == "admin"
    finally:
        await built.close()
