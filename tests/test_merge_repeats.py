"""Merging on write keeps different facts apart and private text out of groups (issue #23).

``write_memory`` merges into a memory only a true repeat of it (the same
statement in nearly the same words, ``ranking/repeats``) written in the same
place (same scope, same origin). The embedder is the bundled
multilingual-e5-small (``EMBEDDING_PROCTOL=local``): every counter-example
below has stored vectors at least as close as the merge's cosine threshold, so
what keeps the two memories apart is the text rule, not the model.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.botproject import make_runtime
from tests.helpers import view_of
from tests.lazy import lazy_import

D = lazy_import("amrita_plugin_memory.ranking.repeats")
K = lazy_import("amrita_plugin_memory.storage.keys")
T = lazy_import("amrita_plugin_memory.tools.memory_tools", "amrita_plugin_memory.storage.scope")

GROUP = 4242


@pytest.fixture
async def rt(tmp_path: Path) -> AsyncIterator[Any]:
    runtime = make_runtime(tmp_path, embedding_proctol="local", embedding_model_name="auto")
    runtime.embedder.timeout = 60.0
    yield runtime
    await runtime.close()


def caller(uid: int, gid: int | None = None) -> Any:
    return T.ScopeRules().of_chat(K.target_from_ids(uid, gid))


async def write(rt: Any, who: Any, text: str) -> dict[str, Any]:
    result = await rt.tools.write_memory(who, {"content": text, "tags": ["t"]})
    assert result["ok"], result
    return result


async def contents(rt: Any, uid: int) -> list[str]:
    return sorted(r.content for r in await rt.store.list(view_of(K.user_key(str(uid))), limit=50))


COUNTER_EXAMPLES = [
    ("another person", "用户的哥哥在腾讯工作", "用户在腾讯工作"),
    ("direction", "用户欠我500块", "我欠用户500块"),
    ("wife / ex-wife", "用户的妻子是小学老师", "用户的前妻是小学老师"),
    ("plan / doing", "用户想学日语", "用户在学日语"),
    ("negation", "用户喜欢吃香菜", "用户不喜欢吃香菜"),
    ("number", "用户每周加班三天", "用户每周加班两天"),
    ("modality", "用户恐怕要搬去天河区了", "用户要搬去天河区了"),
]


@pytest.mark.parametrize(
    ("first", "second"), [c[1:] for c in COUNTER_EXAMPLES], ids=[c[0] for c in COUNTER_EXAMPLES]
)
async def test_different_facts_with_close_vectors_stay_two_memories(
    rt: Any, first: str, second: str
) -> None:
    for uid, (a, b) in ((10001, (first, second)), (10002, (second, first))):
        old = await write(rt, caller(uid), a)
        new = await write(rt, caller(uid), b)
        assert "merged" not in new and new["memory"]["id"] != old["memory"]["id"]
        assert await contents(rt, uid) == sorted([a, b])
        # The model puts them together: only the text rule keeps them apart.
        va = await rt.store.stored_vector(view_of(K.user_key(str(uid))), old["memory"]["id"])
        vb = await rt.store.stored_vector(view_of(K.user_key(str(uid))), new["memory"]["id"])
        assert D.cosine(va, vb) >= rt.store.settings.dedup_min_cosine
        assert await rt.store.archive.list(view_of(K.user_key(str(uid)))) == []  # nothing archived


async def test_a_true_repeat_is_still_merged(rt: Any) -> None:
    first = await write(rt, caller(10003), "用户喜欢喝咖啡")
    again = await write(rt, caller(10003), "用户很喜欢喝咖啡。")
    assert again["merged"] is True and again["memory"]["id"] == first["memory"]["id"]
    assert await contents(rt, 10003) == ["用户很喜欢喝咖啡。"]


SECRET = "用户在腾讯上班，正在偷偷找新工作"


@pytest.mark.parametrize("private_first", [True, False], ids=["private-first", "group-first"])
async def test_private_and_group_writes_are_never_merged(rt: Any, private_first: bool) -> None:
    """The leak of issue #23: a group write merged into a private memory made the
    private text readable in the group (and the reverse order alike)."""
    uid = 10004
    private, group, other_group = caller(uid), caller(uid, GROUP), caller(uid, GROUP + 1)
    writes = [(private, SECRET), (group, "用户在腾讯上班")]
    # The very same text said in private, in a group and in another group: three memories.
    writes += [(private, "用户每天骑车上班"), (group, "用户每天骑车上班")]
    writes += [(other_group, "用户每天骑车上班")]
    if not private_first:
        writes.reverse()
    for who, text in writes:
        assert "merged" not in await write(rt, who, text)
    records = await rt.store.list(view_of(K.user_key(str(uid))), limit=50)
    by_origin = sorted((r.origin, r.content) for r in records)
    assert by_origin == [
        (f"group:{GROUP}", "用户在腾讯上班"),
        (f"group:{GROUP}", "用户每天骑车上班"),
        (f"group:{GROUP + 1}", "用户每天骑车上班"),
        ("private", SECRET),
        ("private", "用户每天骑车上班"),
    ]
    # A write repeating each of them merges into the memory of its own origin only.
    for who, text, origin in [
        (group, "用户在腾讯上班呢", f"group:{GROUP}"),
        (private, "用户在腾讯上班，正在偷偷找新工作呢", "private"),
    ]:
        merged = await write(rt, who, text)
        assert merged["merged"] is True
        after = {r.id: r for r in await rt.store.list(view_of(K.user_key(str(uid))), limit=50)}
        assert len(after) == 5
        record = after[merged["memory"]["id"]]
        assert record.origin == origin and record.content == text
    # The group's model never reads the private text, by search or by listing.
    for query in ("用户在哪上班", "用户在找新工作吗", "腾讯"):
        found = await rt.tools.read_memory(group, {"query": query, "top_k": 10})
        assert found["ok"] and found["memories"], found
        assert not any("偷偷" in m["content"] for m in found["memories"]), found
    listed = await rt.tools.list_memory(group, {"limit": 50})
    assert listed["ok"] and not any("偷偷" in m["content"] for m in listed["memories"])
    # In private the user still sees it.
    mine = await rt.tools.read_memory(private, {"query": "用户在找新工作吗"})
    assert any("偷偷" in m["content"] for m in mine["memories"])
