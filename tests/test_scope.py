"""The request's scope, every combination, without a bot turn (``storage/scope.py``).

One table: the chat (private, group A, group B) × the caller's group rights × ``group_memo_editors``
× the two privacy switches × a private reply, each asked for both kinds (``user``, ``group``).
The expectations are written out here from the privacy rule of ARCHITECTURE.md (not computed
with ``GroupPrivacy``), so a change of the rule in the code fails here.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import pytest

from tests.lazy import lazy_import

S = lazy_import(
    "amrita_plugin_memory.storage.scope",
    "amrita_plugin_memory.storage.keys",
    "amrita_plugin_memory.core.records",
    "amrita_plugin_memory.core.errors",
    "amrita_plugin_memory.core.config",
)

UID, OTHER_UID = "10001", "10002"
OWN, OTHER = "QQPlatform_Private_10001", "QQPlatform_Private_10002"
GROUPS = {"A": "QQPlatform_Group_20001", "B": "QQPlatform_Group_20002"}
GROUP_IDS = {"A": "20001", "B": "20002"}
ORIGINS = {"private": "private", "A": "group:20001", "B": "group:20002"}

MANAGER_ONLY = "群管理员、群主或超级用户"
GROUP_ONLY = "scope=group 只能在群聊中使用；私聊中请使用 scope=user"


@dataclass(frozen=True)
class Case:
    chat: str  # "private", "A" or "B"
    admin: bool
    editors: str  # group_memo_editors
    private_in_groups: bool
    across_groups: bool
    private_reply: bool

    def __str__(self) -> str:
        flags = [
            self.chat,
            "admin" if self.admin else "member",
            f"editors={self.editors}",
            "private_in_groups" if self.private_in_groups else "",
            "across" if self.across_groups else "",
            "private_reply" if self.private_reply else "",
        ]
        return "-".join(f for f in flags if f)


BOTH = (False, True)
CASES = [
    Case(chat, admin, editors, private_in_groups, across, private_reply)
    for chat, admin, editors, private_in_groups, across, private_reply in itertools.product(
        ("private", "A", "B"), BOTH, ("member", "admin"), BOTH, BOTH, BOTH
    )
]


class Rights:
    """A lazy admin check that counts how often it was asked."""

    def __init__(self, admin: bool) -> None:
        self.admin = admin
        self.asked = 0

    async def __call__(self) -> bool:
        self.asked += 1
        return self.admin


def build(case: Case) -> tuple[Any, Rights]:
    group = None if case.chat == "private" else GROUPS[case.chat]
    gid = None if case.chat == "private" else GROUP_IDS[case.chat]
    target = S.ChatTarget(UID, OWN, group, gid)
    rules = S.ScopeRules(
        S.GroupPrivacy(
            private_memories_in_groups=case.private_in_groups,
            group_memories_across_groups=case.across_groups,
        ),
        case.editors,
    )
    rights = Rights(case.admin)
    return rules.of_chat(target, rights, private_reply=case.private_reply), rights


def expected_user_origins(case: Case) -> dict[str, bool]:
    """Which origins of the speaker's own memories the answer may show."""
    if case.chat == "private" or case.private_reply or case.private_in_groups:
        return {"private": True, "A": True, "B": True}
    if case.across_groups:
        return {"private": False, "A": True, "B": True}
    return {origin: origin == case.chat for origin in ORIGINS}


def expected_rights(case: Case, kind: str) -> dict[str, bool]:
    if kind == "user":
        return {"write": True, "update": True, "delete": True}
    if case.chat == "private":
        return {"write": False, "update": False, "delete": False}
    return {
        "write": case.editors == "member" or case.admin,
        "update": case.admin,
        "delete": case.admin,
    }


@pytest.mark.parametrize("kind", ["user", "group"])
@pytest.mark.parametrize("case", CASES, ids=str)
async def test_scope_table(case: Case, kind: str) -> None:
    scope, rights = build(case)
    in_group = case.chat != "private"

    # Partition: the speaker's own, or this chat's group; never another user's or group's.
    if kind == "user":
        assert scope.partition(kind) == OWN != OTHER
    elif in_group:
        assert scope.partition(kind) == GROUPS[case.chat]
        assert GROUPS["B" if case.chat == "A" else "A"] != scope.partition(kind)
    else:
        with pytest.raises(S.ScopeRefused, match=GROUP_ONLY):
            scope.partition(kind)

    # Origins: the privacy rule for the speaker's memories; a group's shared partition: all.
    origins = scope.origins(kind)
    want = expected_user_origins(case) if kind == "user" else dict.fromkeys(ORIGINS, True)
    assert {name: origins.allows(origin) for name, origin in ORIGINS.items()} == want
    assert origins.narrows is (not all(want.values()))
    assert rights.asked == 0, "reading never asks for group rights"

    # Writes: where they come from, and whether each change is allowed.
    assert scope.origin == ORIGINS[case.chat]
    for action, allowed in expected_rights(case, kind).items():
        assert await scope.allows(action, kind) is allowed, action
        if allowed:
            assert await scope.require(action, kind) == scope.partition(kind)
        else:
            with pytest.raises(S.ScopeRefused) as refused:
                await scope.require(action, kind)
            text = str(refused.value)
            if not in_group:
                assert text == GROUP_ONLY
            elif action == "write":
                assert text == (
                    f"本 Bot 设置为只有{MANAGER_ONLY}可以写入群共享记忆"
                    "（group_memo_editors = admin），未做任何修改"
                )
            else:
                verb = "修改" if action == "update" else "删除"
                assert text == f"{verb}群共享记忆需要{MANAGER_ONLY}权限"
    if kind == "user" or not in_group:
        assert rights.asked == 0, "the own partition needs no group rights"

    # The memo of this chat (Amrita's session).
    memo_allowed = not in_group or case.editors == "member" or case.admin
    if memo_allowed:
        assert await scope.require_memo() == (GROUPS[case.chat] if in_group else OWN)
    else:
        with pytest.raises(S.ScopeRefused, match="修改群备忘录"):
            await scope.require_memo()
    assert await scope.manages_group() is (in_group and case.admin)


def test_table_covers_every_combination() -> None:
    assert len(CASES) == 3 * 2 * 2 * 2 * 2 * 2 == 96
    assert len(set(CASES)) == len(CASES)


async def test_another_users_scope_names_only_their_partition() -> None:
    rules = S.ScopeRules()
    mine = rules.of_chat(S.ChatTarget(UID, OWN, GROUPS["A"], GROUP_IDS["A"]))
    theirs = rules.of_chat(S.ChatTarget(OTHER_UID, OTHER, GROUPS["A"], GROUP_IDS["A"]))
    assert mine.partition("user") == OWN and theirs.partition("user") == OTHER
    assert mine.partition("group") == theirs.partition("group") == GROUPS["A"]


async def test_unknown_kind_is_refused() -> None:
    scope = S.ScopeRules().of_chat(S.ChatTarget(UID, OWN, None, None))
    with pytest.raises(S.ScopeRefused, match="只能是 user 或 group"):
        scope.partition("everyone")
    assert await scope.allows("write", "everyone") is False


@pytest.mark.parametrize("chat", ["private", "A"])
async def test_loop_scope_is_the_users_private_scope_without_group_rights(chat: str) -> None:
    group = None if chat == "private" else GROUPS[chat]
    gid = None if chat == "private" else GROUP_IDS[chat]
    scope = S.Scope.of_loop(S.ChatTarget(UID, OWN, group, gid))
    assert scope.partition("user") == OWN and not scope.in_group
    assert all(scope.origins("user").allows(o) for o in ORIGINS.values())
    assert scope.origin == "private"
    with pytest.raises(S.ScopeRefused, match=GROUP_ONLY):
        scope.partition("group")
    assert await scope.allows("delete", "user") and not await scope.manages_group()
    assert await scope.require_memo() == OWN


@pytest.mark.parametrize("partition", [OWN, GROUPS["A"], "user_10001"])
async def test_operator_scope_administers_one_partition_with_every_origin(partition: str) -> None:
    scope = S.Scope.of_operator(partition)
    for kind in ("user", "group"):
        assert scope.partition(kind) == partition
        assert not scope.origins(kind).narrows
        for action in ("write", "update", "delete"):
            assert await scope.require(action, kind) == partition


@pytest.mark.parametrize(
    ("across", "shown"), [(False, {"A"}), (True, {"A", "B"})], ids=["default", "across"]
)
async def test_turn_and_batch_scopes_read_what_their_chat_may(
    across: bool, shown: set[str]
) -> None:
    """Recall and extraction: the chat's rule, never group rights."""
    rules = S.ScopeRules(S.GroupPrivacy(group_memories_across_groups=across), "member")
    turn = rules.of_turn(S.ChatTarget(UID, OWN, GROUPS["A"], GROUP_IDS["A"]))
    batch = rules.of_batch(UID, OWN, ORIGINS["A"])
    for scope in (turn, batch):
        assert scope.partition("user") == OWN and scope.origin == ORIGINS["A"]
        allowed = {name for name, o in ORIGINS.items() if scope.origins("user").allows(o)}
        assert allowed == shown
        assert not await scope.allows("delete", "group")
    private = rules.of_batch(UID, OWN, "private")
    assert private.origin == "private" and not private.in_group
    assert not private.origins("user").narrows


def test_rules_follow_the_configuration() -> None:
    file = S.ConfigFile().model_copy(
        update={
            "group_memo_editors": "admin",
            "private_memories_in_groups": True,
            "group_memories_across_groups": False,
        }
    )
    rules = S.ScopeRules.from_config(file)
    assert rules.group_editors == "admin"
    assert rules.privacy == S.GroupPrivacy(private_memories_in_groups=True)
