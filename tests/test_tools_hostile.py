"""Hostile tool arguments: clear errors, nothing written, nothing lost."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import new_memory, runtime, view_of
from tests.lazy import lazy_import
from tests.reliability_stats import STATS

K = lazy_import("amrita_plugin_memory.storage.keys", "amrita_plugin_memory.adapters.events")
S = lazy_import("amrita_plugin_memory.tools.surface")
T = lazy_import(
    "amrita_plugin_memory.tools.memory_tools",
    "amrita_plugin_memory.storage.scope",
    "amrita_plugin_memory.tools.args",
    "amrita_plugin_memory.adapters.events",
)

UID, GID, OTHER = 13001, 23001, 13002


def caller(group: bool = False, admin: bool = False) -> Any:
    async def manage() -> bool:
        return admin

    return T.ScopeRules().of_chat(K.target_from_ids(UID, GID if group else None), manage)


async def snapshot() -> dict[str, Any]:
    rt = runtime()
    parts = [f"QQPlatform_Private_{UID}", f"QQPlatform_Group_{GID}", f"QQPlatform_Private_{OTHER}"]
    out: dict[str, Any] = {}
    for p in parts:
        out[p] = sorted(
            (r.id, r.content, tuple(r.tags), r.importance, r.updated_at)
            for r in await rt.store.list(view_of(p), limit=1000)
        )
    out["memo"] = await rt.memo.get(view_of(f"QQPlatform_Private_{UID}"))
    return out


@pytest.fixture
async def seeded() -> AsyncIterator[dict[str, Any]]:
    rt = runtime()
    mine = await rt.store.add(
        new_memory(f"QQPlatform_Private_{UID}", "user", "我的记忆", tags=["a"])
    )
    group = await rt.store.add(new_memory(f"QQPlatform_Group_{GID}", "group", "群的记忆"))
    other = await rt.store.add(new_memory(f"QQPlatform_Private_{OTHER}", "user", "别人的记忆"))
    await rt.memo.update(f"QQPlatform_Private_{UID}", "原备忘录")
    yield {"mine": mine.id, "group": group.id, "other": other.id}
    for key in (
        f"QQPlatform_Private_{UID}",
        f"QQPlatform_Group_{GID}",
        f"QQPlatform_Private_{OTHER}",
    ):
        for r in await rt.store.list(view_of(key), limit=1000):
            await rt.store.delete(key, r.id)


HOSTILE: list[tuple[str, dict[str, Any], str]] = [
    ("write_memory", {}, "缺少参数 content"),
    ("write_memory", {"content": None, "tags": []}, "缺少参数 content"),
    ("write_memory", {"content": 42, "tags": []}, "必须是字符串"),
    ("write_memory", {"content": "   ", "tags": []}, "不能为空"),
    ("write_memory", {"content": "x" * 2001, "tags": []}, "过长"),
    ("write_memory", {"content": "ok", "tags": 5}, "字符串数组"),
    ("write_memory", {"content": "ok", "tags": ["a", 1]}, "字符串数组"),
    ("write_memory", {"content": "ok", "tags": [f"t{i}" for i in range(11)]}, "标签过多"),
    ("write_memory", {"content": "ok", "tags": ["x" * 33]}, "过长"),
    ("write_memory", {"content": "ok", "tags": [], "importance": "urgent"}, "low, medium, high"),
    ("write_memory", {"content": "ok", "tags": [], "importance": 3}, "importance"),
    ("write_memory", {"content": "ok", "tags": [], "scope": "world"}, "user, group"),
    ("write_memory", {"content": "ok", "tags": [], "scope": "group"}, "只能在群聊中使用"),
    ("read_memory", {"query": ""}, "不能为空"),
    ("read_memory", {"query": "x", "top_k": 0}, "1 到 20"),
    ("read_memory", {"query": "x", "top_k": -3}, "1 到 20"),
    ("read_memory", {"query": "x", "top_k": 10**9}, "1 到 20"),
    ("read_memory", {"query": "x", "top_k": "many"}, "整数"),
    ("read_memory", {"query": "x", "top_k": True}, "整数"),
    ("read_memory", {"query": "x", "top_k": 2.5}, "整数"),
    ("read_memory", {"query": "x" * 501}, "过长"),
    ("read_memory", {"query": "x", "importance": "top"}, "importance"),
    ("read_memory", {"query": ["x"]}, "必须是字符串"),
    ("update_memory", {"scope": "user", "content": "y"}, "缺少参数 id"),
    ("update_memory", {"id": "MINE", "scope": "user"}, "至少提供"),
    ("update_memory", {"id": "OTHER", "scope": "user", "content": "篡改"}, "不存在"),
    ("update_memory", {"id": "0" * 32, "scope": "user", "content": "y"}, "不存在"),
    ("update_memory", {"id": "MINE", "scope": "user", "content": "x" * 2001}, "过长"),
    ("update_memory", {"id": "x" * 65, "scope": "user", "content": "y"}, "过长"),
    ("delete_memory", {"id": "OTHER", "scope": "user"}, "不存在"),
    ("delete_memory", {"id": "GROUP", "scope": "user"}, "不存在"),
    ("delete_memory", {"id": {"$ne": ""}, "scope": "user"}, "必须是字符串"),
    ("delete_memory", {"id": "MINE", "scope": "group"}, "只能在群聊中使用"),
    ("list_memory", {"limit": 0}, "1 到 50"),
    ("list_memory", {"limit": 51}, "1 到 50"),
    ("list_memory", {"limit": "x"}, "整数"),
    ("list_memory", {"limit": 5, "offset": -1}, "0 到"),
    ("update_memo", {}, "必须是字符串"),
    ("update_memo", {"content": 7}, "必须是字符串"),
    ("update_memo", {"content": "长" * 1001}, "超出上限"),
]


@pytest.mark.parametrize(("tool", "args", "expected"), HOSTILE)
async def test_hostile_arguments_change_nothing(
    seeded: dict[str, Any], tool: str, args: dict[str, Any], expected: str
) -> None:
    args = {
        k: seeded[v.lower()] if isinstance(v, str) and v in ("MINE", "OTHER", "GROUP") else v
        for k, v in args.items()
    }
    before = await snapshot()
    result = await getattr(runtime().tools, tool)(caller(), args)
    STATS.inputs_tried += 1
    assert result["ok"] is False
    assert expected in result["error"], result["error"]
    assert await snapshot() == before


async def test_group_member_cannot_change_group_memories(seeded: dict[str, Any]) -> None:
    tools = runtime().tools
    before = await snapshot()
    for tool, args in [
        ("update_memory", {"id": seeded["group"], "scope": "group", "importance": "high"}),
        ("delete_memory", {"id": seeded["group"], "scope": "group"}),
    ]:
        result = await getattr(tools, tool)(caller(group=True, admin=False), args)
        assert result["ok"] is False and "管理员" in result["error"]
    assert await snapshot() == before
    result = await tools.delete_memory(
        caller(group=True, admin=True), {"id": seeded["group"], "scope": "group"}
    )
    assert result == {"ok": True, "deleted": seeded["group"]}


async def test_lenient_but_safe_coercions(seeded: dict[str, Any]) -> None:
    tools = runtime().tools
    result = await tools.write_memory(
        caller(),
        {
            "content": " 喜欢爵士乐 ",
            "tags": "音乐， 爵士,音乐",
            "importance": "HIGH",
            "scope": "user",
        },
    )
    assert result["ok"] is True
    assert result["memory"]["content"] == "喜欢爵士乐"
    assert result["memory"]["tags"] == ["音乐", "爵士"]
    assert result["memory"]["importance"] == "high"
    listed = await tools.list_memory(caller(), {"limit": "2", "scope": "user"})
    assert listed["ok"] and len(listed["memories"]) == 2 and listed["total"] == 2


async def test_concurrent_memo_writes_leave_one_complete_text() -> None:
    rt = runtime()
    key = "QQPlatform_Private_13100"
    texts = [f"版本{i}：" + chr(0x4E00 + i) * 200 for i in range(30)]
    results = await asyncio.gather(*(rt.memo.update(key, t) for t in texts))
    assert all(r.ok for r in results)
    from amrita_plugin_memory.storage.memo_store import MemoService

    uncached = MemoService(rt.memo.max_chars)  # read back from SQLite, not the cache
    assert await uncached.get(view_of(key)) in texts


async def test_memo_cache_holds_empty_values() -> None:
    rt = runtime()
    key = "QQPlatform_Private_13101"
    assert await rt.memo.get(view_of(key)) == ""
    assert key in rt.memo._cache
    assert (await rt.memo.update(key, "新内容")).ok
    assert await rt.memo.get(view_of(key)) == "新内容"


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=40),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=8,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data(), in_group=st.booleans())
async def test_property_no_exception_escapes(data: st.DataObject, in_group: bool) -> None:
    """Whatever the model sends, the tool answers with a dict and never raises."""
    # Every declared chat tool and every argument its schema names: a new tool is
    # covered without being listed here.
    declared = {t.name: t for t in S.declared_tools(runtime().tools)}
    tool = declared[data.draw(st.sampled_from(sorted(declared)), label="tool")]
    names = [*sorted(tool.schema.parameters.properties), "unknown"]
    args = data.draw(st.dictionaries(st.sampled_from(names), _json_values, max_size=6))
    result = await tool.handler(caller(group=in_group), args)
    STATS.inputs_tried += 1
    assert isinstance(result, dict) and isinstance(result["ok"], bool)
    if not result["ok"]:
        assert isinstance(result["error"], str) and result["error"]
        assert "Traceback" not in result["error"]
