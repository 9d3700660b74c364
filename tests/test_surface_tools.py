"""The chat tools are declared beside their logic and registered from the declaration.

ARCHITECTURE.md's worked example ("a chat tool with a config switch") is walked
here as a newcomer would do it: a config key, one method with its schema and
switch, nothing else — and the tool is offered to the model only while the
switch is on, answers a real chat turn, and is covered by the hostile-argument
test without being listed anywhere. The tool set is the declared one, whatever
it is: a new tool needs no change here, only its row in the README's table.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.chat import model_requests, tool_results, turn
from tests.chat import offered as offered_in
from tests.events import private_event
from tests.helpers import new_memory, runtime, view_of
from tests.servers import ChatServer, Reply

README = Path(__file__).resolve().parents[1] / "README.md"


def declared() -> set[str]:
    """The chat tools the session's ``MemoryTools`` declares (whatever they are today)."""
    from amrita_plugin_memory.tools.surface import declared_tools

    names = [t.name for t in declared_tools(runtime().tools)]
    assert len(names) == len(set(names))
    return set(names)


def readme_tools() -> set[str]:
    """The tools named in the first column of README.md's "对话模型的工具" table."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## 对话模型的工具", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\|\s*`(\w+)`\s*\|", section, re.M))


def test_the_registered_tools_are_the_declared_ones() -> None:
    from amrita_core import ToolsManager

    tools = declared()
    assert "write_memory" in tools  # the walk found the marked methods
    assert tools <= set(ToolsManager().tools_meta())


def test_the_readme_lists_exactly_the_declared_tools() -> None:
    assert readme_tools() == declared()


def test_a_schema_named_unlike_its_method_is_refused() -> None:
    from amrita_plugin_memory.tools.schemas import define
    from amrita_plugin_memory.tools.surface import declared_tools, surface_tool

    class Misnamed:
        @surface_tool(lambda: define("example_counts", "…", {}, []))
        async def example_count(self, scope: Any, args: Mapping[str, Any]) -> dict[str, Any]:
            return {"ok": True}

    with pytest.raises(TypeError, match="example_count"):
        declared_tools(Misnamed())


async def test_the_worked_example_a_tool_with_a_config_switch(chat_server: ChatServer) -> None:
    """Step 1 the key, step 2 the method with its schema and switch; nothing else."""
    from amrita_core import ToolsManager

    from amrita_plugin_memory.adapters.surface_tools import register_surface_tools
    from amrita_plugin_memory.core.config import ConfigFile, render_config_toml
    from amrita_plugin_memory.core.records import SCOPES
    from amrita_plugin_memory.storage.scope import Scope
    from amrita_plugin_memory.tools import results
    from amrita_plugin_memory.tools.args import parse_enum
    from amrita_plugin_memory.tools.memory_tools import MemoryTools
    from amrita_plugin_memory.tools.schemas import define, scope_prop
    from amrita_plugin_memory.tools.surface import surface_tool

    # 1. The key (a field of the file's configuration), off by default.
    class WithSwitch(ConfigFile):
        example_count_tool: bool = False

    assert "example_count_tool = false" in render_config_toml(WithSwitch())

    # 2. The tool: its logic, its schema and its switch in one place; its answer from
    #    tools/results, what it reads through the request's view.
    def example_count_schema() -> Any:
        return define("example_count", "数一数记忆有几条。", {"scope": scope_prop()}, ["scope"])

    class CountingTools(MemoryTools):
        @surface_tool(example_count_schema, enabled=lambda tools: tools.config.example_count_tool)
        async def example_count(self, scope: Scope, args: Mapping[str, Any]) -> dict[str, Any]:
            async def run() -> dict[str, Any]:
                kind = parse_enum(args, "scope", SCOPES, "user")
                assert kind
                return results.ok(count=await self.store.count(scope.view(kind)))

            return await self._guard("example_count", run)

    rt = runtime()
    tools = CountingTools(
        rt.store,
        rt.memo,
        calendar=rt.calendar,
        memory_limit=rt.tools.memory_limit,
        config=WithSwitch(),
    )
    uid = 17101
    await rt.store.add(new_memory(f"QQPlatform_Private_{uid}", "user", "喜欢爬山"))
    await rt.store.add(new_memory(f"QQPlatform_Private_{uid}", "user", "住在杭州"))
    own = declared()
    manager = ToolsManager()
    for name in own:  # registered from the new object below (Amrita refuses a second name)
        manager.remove_tool(name)
    try:
        assert set(register_surface_tools(tools, lambda: rt.scopes)) == {*own, "example_count"}

        # Switched off: the model is not offered the tool.
        await turn(chat_server, private_event(uid, "你好"), Reply.text("你好！"))
        assert all("example_count" not in offered_in(r) for r in model_requests(chat_server))

        # Switched on at run time: offered, and it answers from the speaker's partition only.
        tools.config = WithSwitch(example_count_tool=True)
        await turn(
            chat_server,
            private_event(uid, "你记得我几件事？"),
            Reply.tool_call("example_count", {"scope": "user"}),
            Reply.text("两件。"),
        )
        assert "example_count" in offered_in(model_requests(chat_server)[0])
        assert tool_results(chat_server) == [{"ok": True, "count": 2}]

        # An argument the schema allows but this chat does not: the scope's clear error.
        await turn(
            chat_server,
            private_event(uid, "再数一次"),
            Reply.tool_call("example_count", {"scope": "group"}),
            Reply.text("好的。"),
        )
        (refused,) = tool_results(chat_server)
        assert refused["ok"] is False and "只能在群聊中使用" in refused["error"]
    finally:
        for name in (*own, "example_count"):
            manager.remove_tool(name)
        register_surface_tools(rt.tools, lambda: rt.scopes)  # the session's own tools again
        for record in await rt.store.list(view_of(f"QQPlatform_Private_{uid}"), limit=10):
            await rt.store.delete(f"QQPlatform_Private_{uid}", record.id)


TOOLS_BUDGET = 2250
"""Characters the six chat tools may take in every request of every turn, all together
(1,990 before time: ``since`` / ``until``, ``event_date`` and ``replaces`` added 257)."""

SIX = {"write_memory", "read_memory", "update_memory", "delete_memory", "list_memory"}
SIX |= {"update_memo"}
"""The spec's six chat tools (the budget is theirs; another declared tool adds its own)."""


async def test_the_six_chat_tools_fit_the_budget_and_keep_what_a_model_needs(
    chat_server: ChatServer,
) -> None:
    """Measured as sent: the request body's JSON (the OpenAI SDK's compact separators)."""
    import json

    await turn(chat_server, private_event(17201, "你好"), Reply.text("你好！"))
    request = model_requests(chat_server)[0]
    six = [t for t in request["tools"] if t["function"]["name"] in SIX]
    assert {t["function"]["name"] for t in six} == SIX
    sent = json.dumps(six, ensure_ascii=False, separators=(",", ":"))
    assert len(sent) <= TOOLS_BUDGET, (len(sent), sent)

    by_name = {t["function"]["name"]: t["function"] for t in six}
    for name, function in by_name.items():
        assert function["description"], name  # what the tool is for
        params = function["parameters"]
        if name != "update_memo":
            assert params["properties"]["scope"]["enum"] == ["user", "group"], name
            assert "scope" in params["required"], name
    # Which tool for what: the memo for what every turn needs, L2 for the rest.
    assert "update_memo" in by_name["write_memory"]["description"]
    assert "整篇替换" in by_name["update_memo"]["description"]
    # What the scopes mean, said once.
    assert sent.count("本群共享") == 1 and "仅群聊" in sent
    # Group memories are changed by managers only.
    assert "管理员" in by_name["update_memory"]["description"]
    assert "管理员" in by_name["delete_memory"]["description"]
    # The limits, as keywords the model reads and Amrita checks.
    write = by_name["write_memory"]["parameters"]["properties"]
    assert write["content"]["maxLength"] == 2000 and write["tags"]["maxItems"] == 10
    assert by_name["read_memory"]["parameters"]["properties"]["top_k"]["maximum"] == 20
    assert by_name["list_memory"]["parameters"]["properties"]["limit"]["maximum"] == 50
    # The spec's parameters, each tool's all there (and the optional time ones, never required).
    assert {n: set(f["parameters"]["properties"]) for n, f in by_name.items()} == {
        "write_memory": {"content", "tags", "importance", "scope", "event_date", "replaces"},
        "read_memory": {"query", "top_k", "importance", "scope", "since", "until"},
        "update_memory": {"id", "scope", "content", "tags", "importance", "event_date"},
        "delete_memory": {"id", "scope"},
        "list_memory": {"limit", "offset", "scope", "since", "until"},
        "update_memo": {"content"},
    }
    for function in by_name.values():
        optional = {"event_date", "replaces", "since", "until"}
        assert not optional & set(function["parameters"].get("required", []))
