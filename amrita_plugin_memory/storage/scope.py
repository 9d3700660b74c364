"""The scope of one request: which partition, which origins, which rights. Decided once.

A :class:`Scope` is built once per request (a chat tool call, a ``/memory``
command, a turn's recall or extraction, an L3 cycle, a console operation)
from who asks where (:class:`~.keys.ChatTarget`, the lazy admin check, whether
the answer is sent privately) and the configuration (:class:`ScopeRules`:
:class:`~..core.records.GroupPrivacy` and ``group_memo_editors``). Every
reader and writer then asks it, so the privacy decisions exist here only:

* :meth:`Scope.partition`: ``user`` is the speaker's personal partition,
  ``group`` this group's shared one (group chats only);
* :meth:`Scope.origins`: which of the partition's memories may be shown to the
  chat the answer goes to (the rule itself is ``GroupPrivacy.origins_for``);
* :meth:`Scope.require`: may this caller write / update / delete there; a
  refusal is a :class:`~..core.errors.ScopeRefused` whose Chinese text goes back
  to the model or the user;
* :meth:`Scope.view`: the two above as one :class:`View`, which every read and
  count of the memory store requires (there is no read "of everything": a
  whole-collection pass is a separately named operator method of the store);
* :meth:`Scope.group_view`: this group's own data as one :class:`GroupView`,
  which every chat-path read of a group's window and of its members' personas
  requires (a user's own persona is read through :meth:`Scope.view` of ``user``);
* :meth:`Scope.user_view`: the speaker's own rows of the tables kept by QQ number
  (the usage ledger, active memory's consent and notice) as one :class:`UserView`.

Background work for a user (an L3 cycle) also carries its :attr:`Scope.fence`:
every write made with the scope awaits it inside the store's write section.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..core.config import ConfigFile
from ..core.errors import ScopeRefused
from ..core.protocols import Fence
from ..core.records import (
    ORIGIN_PRIVATE,
    GroupPrivacy,
    MemoryRecord,
    OriginFilter,
    ScopeKind,
    group_of_origin,
    origin_of_chat,
    where_partition,
)
from .keys import ChatTarget, group_key

__all__ = [
    "MANAGERS",
    "Action",
    "GroupEditors",
    "GroupView",
    "Scope",
    "ScopeKind",
    "ScopeRules",
    "UserView",
    "View",
    "operator_user_view",
    "operator_view",
]

Action = Literal["write", "update", "delete"]
GroupEditors = Literal["member", "admin"]
"""``group_memo_editors`` (config): who may write a group's memo and new group memories."""

MANAGERS = "群管理员、群主或超级用户"
_VERBS: dict[Action, str] = {"write": "写入", "update": "修改", "delete": "删除"}


async def _never() -> bool:
    return False


async def _always() -> bool:
    return True


@dataclass(frozen=True, slots=True)
class View:
    """What one read may see: a partition, and which of its memories by where they were said.

    Every read and count of :class:`~.memory_store.MemoryStore`, of the archive
    (:class:`~.archive.store.ArchiveStore`) and of the memos
    (:class:`~.memo_store.MemoService`) requires one (a plain partition key is
    refused, :meth:`check`; a whole-store read is a separately named operator
    door, kept off the chat path by ``.ci/check_architecture.py``), and only this module
    builds them: :meth:`Scope.view` for a request, :func:`operator_view` for
    the console, the CLI and the work on stored memories as a whole. A new
    reader therefore cannot forget the privacy rule: it has no read without it.
    """

    partition: str
    origins: OriginFilter

    @staticmethod
    def check(view: object) -> View:
        """``view`` if it is a :class:`View`, else ``TypeError`` (a read that names no view)."""
        if not isinstance(view, View):
            raise TypeError(
                "a store read needs a storage.scope.View (Scope.view / operator_view), "
                f"not {type(view).__name__}"
            )
        return view

    def allows(self, record: MemoryRecord) -> bool:
        """Whether ``record`` is one this view shows."""
        return record.partition == self.partition and self.origins.allows(record.origin)

    def allows_meta(self, meta: Mapping[str, Any] | None) -> bool:
        """:meth:`allows` for a row's stored metadata."""
        meta = meta or {}
        return meta.get("user_id") == self.partition and self.origins.allows_meta(meta)

    def where(self, **filters: str | None) -> dict[str, Any]:
        """The Chroma ``where`` of this view (and ``filters``)."""
        return where_partition(self.partition, origins=self.origins, with_vectors=False, **filters)


@dataclass(frozen=True, slots=True)
class GroupView:
    """What a turn in one group may read of the group stores: that group's window and
    the personas of its members (issue #49).

    :class:`~.groups.window_store.GroupWindowStore` and
    :class:`~.groups.persona_store.PersonaStore` require one on the chat path (a plain
    group id is refused, :meth:`check`); only :meth:`Scope.group_view` builds them. A
    read of any group or any user (the console, a user's export and forget, tests) is
    a separately named operator door, kept off the chat path by ``.ci/check_architecture.py``.
    """

    group_id: str

    @staticmethod
    def check(view: object) -> GroupView:
        """``view`` if it is a :class:`GroupView`, else ``TypeError`` (a read that names no group view)."""
        if not isinstance(view, GroupView):
            raise TypeError(
                "a group store read needs a storage.scope.GroupView (Scope.group_view), "
                f"not {type(view).__name__}"
            )
        return view


@dataclass(frozen=True, slots=True)
class UserView:
    """One user's own rows of the tables kept by QQ number: their background spend in
    the usage ledger, their active-memory opt-out and notice (issue #49).

    :class:`~.usage.ledger.UsageLedger`, :class:`~.usage.budget.BackgroundBudget` and
    :class:`~.consent_store.ConsentStore` require one for every read of one user (a
    plain user id is refused, :meth:`check`); only this module builds them:
    :meth:`Scope.user_view` for a request (the speaker, a batch's or the loop's user),
    :func:`operator_user_view` for the console, the CLI and a user's export and forget.
    """

    user_id: str

    @staticmethod
    def check(view: object) -> UserView:
        """``view`` if it is a :class:`UserView`, else ``TypeError`` (a read that names no user view)."""
        if not isinstance(view, UserView):
            raise TypeError(
                "a read of one user's rows needs a storage.scope.UserView "
                f"(Scope.user_view / operator_user_view), not {type(view).__name__}"
            )
        return view


@dataclass(frozen=True, slots=True)
class Scope:
    """Who asks, where, and what that allows; immutable, built once per request.

    ``audience`` is the origin of the chat that sees the answer: the chat's own,
    or ``private`` when the answer is sent to the speaker privately (then it is
    read as in their private chat). ``can_manage_group`` is awaited only when a
    group right is about to be used (it may ask the OneBot API for the role).
    """

    target: ChatTarget
    audience: str
    privacy: GroupPrivacy = field(default_factory=GroupPrivacy)
    group_editors: GroupEditors = "member"
    can_manage_group: Callable[[], Awaitable[bool]] = field(default=_never, compare=False)
    fence: Fence | None = field(default=None, compare=False)
    """Awaited inside the write section before every write made with this scope (the L3
    loop: a forget of its target user in any process voids the cycle's writes)."""

    @classmethod
    def of_loop(cls, target: ChatTarget, fence: Fence | None = None) -> Scope:
        """The L3 loop: its target user's private scope, no group rights."""
        private = ChatTarget(target.user_id, target.user, None, None)
        return cls(private, ORIGIN_PRIVATE, fence=fence)

    @classmethod
    def of_operator(cls, partition: str) -> Scope:
        """The console or ``ambot memory``: an operator of ``partition``, every origin.

        Both kinds name that one partition (an operator picks a partition, not a
        kind), and every right is granted: the operator's access is checked
        before (the WebUI login, the local token).
        """
        target = ChatTarget("", partition, partition, None)
        return cls(target, ORIGIN_PRIVATE, can_manage_group=_always)

    @property
    def origin(self) -> str:
        """The origin of what is written here: ``private`` or this group's."""
        return origin_of_chat(self.target.group_id)

    @property
    def in_group(self) -> bool:
        return self.target.is_group

    @property
    def user_id(self) -> str:
        return self.target.user_id

    def partition(self, kind: str) -> str:
        """The partition of ``kind``; ``group`` outside a group chat is refused."""
        if kind == "user":
            return self.target.user
        if kind != "group":
            raise ScopeRefused(f"未知的 scope：{kind}（只能是 user 或 group）")
        if self.target.group is None:
            raise ScopeRefused("scope=group 只能在群聊中使用；私聊中请使用 scope=user")
        return self.target.group

    def origins(self, kind: str) -> OriginFilter:
        """Which memories of ``kind``'s partition the answer may show.

        A group's shared partition: all. The speaker's own: what
        :meth:`GroupPrivacy.origins_for` allows for the audience.
        """
        if kind != "user":
            return OriginFilter.ALL
        return self.privacy.origins_for(self.audience)

    def view(self, kind: str) -> View:
        """What a read of ``kind``'s partition may see (:meth:`partition`, :meth:`origins`)."""
        return View(self.partition(kind), self.origins(kind))

    def chat_view(self) -> View:
        """This chat's own data (its memo: Amrita's session, the group in a group chat)."""
        return View(self.target.session, OriginFilter.ALL)

    def conversation_view(self) -> View:
        """This chat's past conversations (issue #48): the group's in a group chat, the
        user's private chat otherwise; never the user's private ones in a group, whatever
        the privacy switches allow for memories."""
        return self.view("group") if self.in_group else self.view("user")

    def group_view(self) -> GroupView:
        """This group's window and its members' personas; outside a group refused."""
        if self.target.group_id is None:
            raise ScopeRefused("群上下文只能在群聊中读取")
        return GroupView(self.target.group_id)

    def user_view(self) -> UserView:
        """The speaker's own rows of the tables kept by QQ number (:class:`UserView`)."""
        if not self.target.user_id:
            raise ScopeRefused("这个请求没有用户")
        return UserView(self.target.user_id)

    async def manages_group(self) -> bool:
        """Whether the caller is a manager of this group (never outside a group)."""
        return self.target.is_group and await self.can_manage_group()

    async def allows(self, action: Action, kind: str) -> bool:
        """Whether :meth:`require` would pass (the partition exists and the right is held)."""
        try:
            await self.require(action, kind)
        except ScopeRefused:
            return False
        return True

    async def require(self, action: Action, kind: str) -> str:
        """The partition ``action`` may change, or :class:`ScopeRefused`.

        The speaker's own partition is always theirs. A group's: changing or
        deleting a memory needs a manager; writing a new one needs one only with
        ``group_memo_editors = "admin"``.
        """
        partition = self.partition(kind)
        if kind == "user":
            return partition
        if action == "write":
            await self._require_editor("写入群共享记忆")
        elif not await self.can_manage_group():
            raise ScopeRefused(f"{_VERBS[action]}群共享记忆需要{MANAGERS}权限")
        return partition

    async def require_memo(self) -> str:
        """The memo this chat may replace (Amrita's session), or :class:`ScopeRefused`."""
        if self.target.is_group:
            await self._require_editor("修改群备忘录")
        return self.target.session

    async def _require_editor(self, what: str) -> None:
        if self.group_editors == "admin" and not await self.can_manage_group():
            raise ScopeRefused(
                f"本 Bot 设置为只有{MANAGERS}可以{what}（group_memo_editors = admin），未做任何修改"
            )


def operator_view(partition: str) -> View:
    """Every memory of ``partition`` (:meth:`Scope.of_operator`): the console, ``ambot memory``,
    the work on stored memories as a whole (``upkeep/``) and the store's own writes."""
    return Scope.of_operator(partition).view("user")


def operator_user_view(user_id: str) -> UserView:
    """The rows of ``user_id`` by their QQ number: the console, ``ambot memory`` and a
    user's export and forget (``upkeep/users``); kept off the chat path."""
    return UserView(user_id)


@dataclass(frozen=True, slots=True)
class ScopeRules:
    """The configuration a :class:`Scope` is decided with, and the constructors that use it."""

    privacy: GroupPrivacy = field(default_factory=GroupPrivacy)
    group_editors: GroupEditors = "member"

    @classmethod
    def from_config(cls, file: ConfigFile) -> ScopeRules:
        return cls(GroupPrivacy.from_config(file), file.group_memo_editors)

    def of_chat(
        self,
        target: ChatTarget,
        can_manage_group: Callable[[], Awaitable[bool]] = _never,
        *,
        private_reply: bool = False,
    ) -> Scope:
        """A person in a chat (a tool call, a command); ``private_reply``: the answer
        goes to their private chat (``/memory user list`` in a group)."""
        audience = ORIGIN_PRIVATE if private_reply else origin_of_chat(target.group_id)
        return Scope(target, audience, self.privacy, self.group_editors, can_manage_group)

    def of_turn(self, target: ChatTarget) -> Scope:
        """A turn's automatic work (active recall and extraction): what the chat may
        read, no group rights."""
        return self.of_chat(target)

    def of_batch(self, user_id: str, partition: str, origin: str) -> Scope:
        """An extraction batch: the turns of ``user_id`` (partition ``partition``) in
        the chat of ``origin``."""
        group_id = group_of_origin(origin)
        group = group_key(group_id) if group_id else None
        return self.of_turn(ChatTarget(user_id, partition, group, group_id))
