"""Reads fail closed: every memory store read names what it may see (``storage/scope.View``).

A read or count of :class:`MemoryStore` without a view does not type-check (pyright, run on
a snippet here) and raises at run time, and so does a chat-path read of a group's window or
of personas without a ``storage/scope.GroupView`` (or the user's own ``View``), and a read of
one user's rows of the usage ledger, the budget, the consent and the L3 loop's state without a
``storage/scope.UserView``; a view narrowed to one group's origin shows only
that origin through every read door; only ``storage/scope.py`` builds views (group and user views too), and nothing
above ``storage/`` reaches into the store's private Chroma calls.
"""

from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import new_memory
from tests.lazy import lazy_import

S = lazy_import("amrita_plugin_memory.storage.scope", "amrita_plugin_memory.core.records")

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "amrita_plugin_memory"
PYRIGHT = ROOT / ".venv" / "bin" / "pyright"

P = "QQPlatform_Private_10001"
G = "20001"
GROUP_A, GROUP_B = "group:20001", "group:20002"

# Every read door of the store with a plain partition key where the view belongs.
UNVIEWED_READS = {
    "get": 'store.get(P, "id")',
    "query": 'store.query(P, "text")',
    "search": 'store.search(P, "text", [0.0])',
    "query_vector": "store.query_vector(P, [0.0])",
    "list": "store.list(P)",
    "count": "store.count(P)",
    "stored_vector": 'store.stored_vector(P, "id")',
    "ids": "store.ids(P)",
    "fetch": 'store.fetch(P, ["id"])',
    "rows": "store.rows(P)",
    "nearest": "store.nearest(P, [[0.0]], top_k=1)",
    # The other per-user stores behind the same rule (issue #49): the archive holds what
    # people asked to delete, a memo is one chat's; neither has a read "of everyone".
    "archive.count": "store.archive.count(P)",
    "archive.list": "store.archive.list(P)",
    "memo.get": "memo.get(P)",
    # The group stores (issue #49 item 1): a turn reads its own group's window and the
    # personas of that group's members through the group view, the speaker's own persona
    # through the view of their partition; any group or user by id is an operator door.
    "windows.recent": "windows.recent(G, 10)",
    "personas.of_members": 'personas.of_members(G, ["10001"])',
    "personas.own": "personas.own(P)",
    "directory.member_labels": "directory.member_labels(G, [], [])",
}


def _snippet(calls: list[str]) -> str:
    body = "\n".join(f"    await {call}" for call in calls)
    return (
        "from amrita_plugin_memory.storage.groups.directory import GroupDirectory\n"
        "from amrita_plugin_memory.storage.groups.persona_store import PersonaStore\n"
        "from amrita_plugin_memory.storage.groups.window_store import GroupWindowStore\n"
        "from amrita_plugin_memory.storage.memo_store import MemoService\n"
        "from amrita_plugin_memory.storage.memory_store import MemoryStore\n"
        "from amrita_plugin_memory.storage.scope import Scope, operator_view\n\n"
        f"P = {P!r}\n"
        f"G = {G!r}\n\n\n"
        "async def reads(\n"
        "    store: MemoryStore,\n"
        "    memo: MemoService,\n"
        "    windows: GroupWindowStore,\n"
        "    personas: PersonaStore,\n"
        "    directory: GroupDirectory,\n"
        "    scope: Scope,\n"
        ") -> None:\n"
        f"{body}\n"
        "    async for _ in store.iter_records(P):\n"
        "        pass\n"
    )


def _pyright_errors(path: Path) -> list[str]:
    done = subprocess.run(
        [str(PYRIGHT), "--outputjson", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    report = json.loads(done.stdout)
    return [d["message"] for d in report["generalDiagnostics"] if d["severity"] == "error"]


@pytest.mark.skipif(not PYRIGHT.exists(), reason="pyright is installed by `uv sync` (dev group)")
def test_a_read_without_a_view_does_not_type_check(tmp_path: Path) -> None:
    bad = tmp_path / "unviewed.py"
    bad.write_text(_snippet(list(UNVIEWED_READS.values())))
    errors = _pyright_errors(bad)
    assert len(errors) == len(UNVIEWED_READS) + 1, errors
    assert all('parameter "view"' in e for e in errors), errors
    # The same reads with a view type-check: the errors above are about the view alone.
    good = tmp_path / "viewed.py"
    viewed = _snippet(list(UNVIEWED_READS.values())).replace("(P", "(operator_view(P)")
    good.write_text(viewed.replace("(G", "(scope.group_view()"))
    assert _pyright_errors(good) == []


async def test_a_read_without_a_view_raises(store: Any) -> None:
    from amrita_plugin_memory.core.config import GroupContextConfig
    from amrita_plugin_memory.storage.groups.persona_store import PersonaStore
    from amrita_plugin_memory.storage.groups.window_store import GroupWindowStore
    from amrita_plugin_memory.storage.memo_store import MemoService

    await store.add(new_memory(P, "user", "用户喜欢喝乌龙茶"))
    memo = MemoService(1000)
    from amrita_plugin_memory.storage.groups.directory import GroupDirectory

    windows, personas = GroupWindowStore(GroupContextConfig()), PersonaStore()
    directory = GroupDirectory(GroupContextConfig())
    names = {
        "store": store,
        "memo": memo,
        "windows": windows,
        "personas": personas,
        "directory": directory,
    }
    for name, call in UNVIEWED_READS.items():
        with pytest.raises(TypeError, match="View"):
            await eval(call, {**names, "P": P, "G": G})  # run for real
        assert name
    with pytest.raises(TypeError, match="View"):
        async for _ in store.iter_records(P):
            pass
    # What a count of everything is for: named as such, for operators.
    assert await store.count_all() == 1
    assert await store.archive.count_all() == 0 and await store.archive.list_all() == []


# The stores kept by QQ number (issue #49 item 1): a read of one user's rows of the usage
# ledger, the budget, active memory's consent and the L3 loop's state names a
# ``storage/scope.UserView``; a bare user id is refused.
USER_READS = {
    "ledger.of_user": "await ledger.of_user(U)",
    "ledger.spent_on": "await ledger.spent_on(D, U)",
    "ledger.pending_spent": "ledger.pending_spent(D, U)",
    "budget.admit": 'await budget.admit("extraction", U)',
    "consent.allows": "await consent.allows(U)",
    "consent.allows_now": "await consent.allows_now(U)",
    "consent.set_allowed": "await consent.set_allowed(U, False)",
    "consent.opted_out_since": "await consent.opted_out_since(U)",
    "consent.noticed": "await consent.noticed(U)",
    "loop.user_items": "user_items({}, U, target=True)",
    "loop.drop_user_items": "drop_user_items({}, U, target=True)",
    "profile.text_of": "await profile.text_of(U)",
}


def _user_snippet(calls: list[str]) -> str:
    body = "\n".join(f"    {call}" for call in calls)
    return (
        "from amrita_plugin_memory.storage.consent_store import ConsentStore\n"
        "from amrita_plugin_memory.storage.scope import Scope, operator_user_view\n"
        "from amrita_plugin_memory.storage.usage import BackgroundBudget, UsageLedger\n"
        "from amrita_plugin_memory.storage.users.loop_profile import ProfileFile\n"
        "from amrita_plugin_memory.storage.users.loop_state_row import (\n"
        "    drop_user_items,\n"
        "    user_items,\n"
        ")\n\n"
        'U = "10001"\n'
        'D = "2026-01-01"\n\n\n'
        "async def reads(\n"
        "    ledger: UsageLedger,\n"
        "    budget: BackgroundBudget,\n"
        "    consent: ConsentStore,\n"
        "    profile: ProfileFile,\n"
        "    scope: Scope,\n"
        ") -> None:\n"
        f"{body}\n"
    )


@pytest.mark.skipif(not PYRIGHT.exists(), reason="pyright is installed by `uv sync` (dev group)")
def test_a_read_of_one_user_without_a_user_view_does_not_type_check(tmp_path: Path) -> None:
    bad = tmp_path / "no_user_view.py"
    bad.write_text(_user_snippet(list(USER_READS.values())))
    errors = _pyright_errors(bad)
    assert len(errors) == len(USER_READS), errors
    assert all('parameter "view"' in e for e in errors), errors
    # The same reads with a view of a request's scope (or the operator door) type-check.
    good = tmp_path / "user_viewed.py"
    calls = [c.replace("(U", "(scope.user_view()") for c in USER_READS.values()]
    calls = [c.replace(", U", ', operator_user_view("10001")') for c in calls]
    good.write_text(_user_snippet(calls))
    assert _pyright_errors(good) == []


async def test_a_read_of_one_user_without_a_user_view_raises(tmp_path: Path) -> None:
    from amrita_plugin_memory.core.calendar import OwnerCalendar
    from amrita_plugin_memory.core.config_sections import BudgetConfig
    from amrita_plugin_memory.storage.consent_store import ConsentStore
    from amrita_plugin_memory.storage.usage import BackgroundBudget, UsageLedger
    from amrita_plugin_memory.storage.users.loop_profile import ProfileFile
    from amrita_plugin_memory.storage.users.loop_state_row import drop_user_items, user_items

    ledger = UsageLedger(OwnerCalendar())
    names = {
        "ledger": ledger,
        "budget": BackgroundBudget(BudgetConfig(background_tokens_per_day=1), ledger),
        "consent": ConsentStore(),
        "profile": ProfileFile(tmp_path / "profile.md"),
        "user_items": user_items,
        "drop_user_items": drop_user_items,
        "U": "10001",
        "D": "2026-01-01",
    }
    for name, call in USER_READS.items():
        with pytest.raises(TypeError, match="UserView"):
            if call.startswith("await "):
                await eval(call.removeprefix("await "), names)  # run for real
            else:
                eval(call, names)
        assert name
    # A request's scope makes the view of its own user; the operator door any user's.
    rules = S.ScopeRules()
    speaker = rules.of_turn(S.ChatTarget("10001", P, None, None)).user_view()
    assert speaker == S.operator_user_view("10001") and S.UserView.check(speaker) is speaker
    assert user_items({}, speaker, target=True).pending == []


async def test_group_reads_go_through_the_turns_scope(store: Any) -> None:
    from amrita_plugin_memory.core.config import GroupContextConfig
    from amrita_plugin_memory.core.errors import ScopeRefused
    from amrita_plugin_memory.storage.groups.persona_store import PersonaStore
    from amrita_plugin_memory.storage.groups.window_store import GroupWindowStore

    rules = S.ScopeRules()
    in_group = rules.of_turn(S.ChatTarget("10001", P, "QQPlatform_Group_20001", "20001"))
    view = in_group.group_view()
    assert view == S.GroupView("20001") and S.GroupView.check(view) is view
    with pytest.raises(ScopeRefused):
        rules.of_turn(S.ChatTarget("10001", P, None, None)).group_view()

    windows, personas = GroupWindowStore(GroupContextConfig()), PersonaStore()
    windows.append("20001", "10001", "甲", "在 A 群说的话", is_bot=False, at=1.0)
    windows.append("20002", "10001", "甲", "在 B 群说的话", is_bot=False, at=2.0)
    assert [e.text for e in await windows.recent(view, 10)] == ["在 A 群说的话"]
    # The operator door reads any group by id (tests, the console).
    assert [e.text for e in await windows.recent_any("20002", 10)] == ["在 B 群说的话"]
    assert list(await personas.of_members(view, ["10001", "10002"])) == ["10001", "10002"]
    assert (await personas.own(in_group.view("user"))).user_id == "10001"
    with pytest.raises(ValueError, match="own partition"):
        await personas.own(in_group.view("group"))


async def test_a_narrowed_view_hides_other_origins_through_every_door(store: Any) -> None:
    mine = await store.add(new_memory(P, "user", "在 A 群说过：用户喜欢喝乌龙茶", origin=GROUP_A))
    other = await store.add(new_memory(P, "user", "在 B 群说过：用户喜欢喝乌龙茶", origin=GROUP_B))
    secret = await store.add(new_memory(P, "user", "私聊说过：用户喜欢喝乌龙茶"))
    in_a = S.ScopeRules().of_chat(S.ChatTarget("10001", P, "QQPlatform_Group_20001", "20001"))
    view = in_a.view("user")
    assert (view.partition, view.origins) == (P, S.OriginFilter.only(GROUP_A))
    vector = await store.stored_vector(S.operator_view(P), mine.id)
    assert vector is not None

    assert await store.get(view, mine.id) is not None
    assert await store.get(view, other.id) is None and await store.get(view, secret.id) is None
    assert [r.id for r in await store.query(view, "乌龙茶", top_k=5)] == [mine.id]
    assert [r.id for r in await store.search(view, "乌龙茶", vector, top_k=5)] == [mine.id]
    assert [r.id for r in await store.query_vector(view, vector, top_k=5)] == [mine.id]
    assert [r.id for r in await store.list(view)] == [mine.id]
    assert await store.count(view) == 1
    assert await store.ids(view) == [mine.id]
    all_ids = [mine.id, other.id, secret.id]
    assert [row.record.id for row in await store.fetch(view, all_ids)] == [mine.id]
    assert [row.record.id for row in await store.rows(view)] == [mine.id]
    assert await store.stored_vector(view, other.id) is None
    assert await store.stored_vector(view, secret.id) is None
    assert [[i for i, _ in hits] for hits in await store.nearest(view, [vector], top_k=3)] == [
        [mine.id]
    ]
    seen = [r.id async for page in store.iter_records(view) for r in page]
    assert seen == [mine.id]
    # The operator's view of the partition shows every origin.
    assert await store.count(S.operator_view(P)) == 3


def _modules() -> list[tuple[str, ast.Module]]:
    return [
        (str(path.relative_to(PACKAGE)), ast.parse(path.read_text(encoding="utf-8")))
        for path in sorted(PACKAGE.rglob("*.py"))
    ]


@pytest.mark.parametrize("kind", ["View", "GroupView", "UserView"])
def test_only_scope_builds_views(kind: str) -> None:
    builders = sorted(
        name
        for name, tree in _modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and (
            (isinstance(node.func, ast.Name) and node.func.id == kind)
            or (isinstance(node.func, ast.Attribute) and node.func.attr == kind)
        )
    )
    assert set(builders) == {"storage/scope.py"}


PRIVATE_DOORS = {"_run", "_write", "_get", "_count", "_query_vector", "_stored_vector", "guard"}


def test_nothing_above_storage_reaches_into_a_store() -> None:
    """Above ``storage/`` a store is used through its public methods only (``upkeep/``
    included: it used to call ``MemoryStore._run``)."""
    reaches = sorted(
        f"{name}:{node.lineno} .{node.attr}"
        for name, tree in _modules()
        if not name.startswith("storage/")
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr in PRIVATE_DOORS
        and not (isinstance(node.value, ast.Name) and node.value.id == "self")
    )
    assert reaches == []
