"""Typed shapes of the L3 loop's persisted state.

The state lives as JSON in the ``SubconsciousState`` row (uid ``amrita_memory``).
:func:`normalize_state` turns whatever JSON is stored (an older plugin
version, a hand-edited row, garbage) into a well-formed :class:`StateData`,
so a bad row degrades to defaults instead of breaking the loop.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NotRequired, TypedDict

if TYPE_CHECKING:
    from amrita_core import UniResponseUsage
    from amrita_core.usage import SessionUsageProxy

__all__ = [
    "SUGGESTION_ACTIONS",
    "AbstractEntry",
    "Cycle",
    "CycleOutcome",
    "CycleResult",
    "KnowledgeSuggestion",
    "PendingMessage",
    "StateData",
    "SuggestionAction",
    "empty_state",
    "normalize_state",
]

CycleOutcome = Literal["success", "failed", "interrupted"]
_OUTCOMES: tuple[CycleOutcome, ...] = ("success", "failed", "interrupted")

SuggestionAction = Literal["create", "update", "delete"]
SUGGESTION_ACTIONS: tuple[SuggestionAction, ...] = ("create", "update", "delete")


class AbstractEntry(TypedDict):
    """What one cycle did, shown to the next cycles (``{{ last_abstracts }}``)."""

    id: NotRequired[str]
    """The entry's stored row (given when it is first stored)."""
    time: str
    """Local ISO time the cycle ended."""
    cycle: int
    outcome: CycleOutcome
    summary: str


class PendingMessage(TypedDict):
    """Something the loop wants the target user to hear, not yet delivered."""

    id: str
    time: str
    intent: str
    """What to tell the user, in the loop's words."""
    text: NotRequired[str]
    """A message already generated for a send that failed (bot offline)."""


class KnowledgeSuggestion(TypedDict):
    """A change of the knowledge base proposed by the chat LLM (``knowledge_suggest``).

    Queued for the loop, which reviews it with ``subconscious_read_suggestions``
    and decides itself whether (and how) to apply it.
    """

    id: str
    time: str
    action: SuggestionAction
    kid: NotRequired[str]
    """The entry concerned (``update`` / ``delete``)."""
    title: str
    summary: NotRequired[str]
    body: NotRequired[str]
    reason: str
    source: str
    """The chat session (uni_id) the suggestion came from."""
    user_id: NotRequired[str]
    """Who suggested it (absent in suggestions queued before this was recorded)."""


class StateData(TypedDict):
    """The JSON document stored in ``SubconsciousState.data``."""

    total_runs: int
    last_abstracts: list[AbstractEntry]
    pending_messages: list[PendingMessage]
    knowledge_suggestions: list[KnowledgeSuggestion]
    """Suggestions from the chat LLM (``knowledge_suggest``), oldest first, bounded."""


def empty_state() -> StateData:
    return {
        "total_runs": 0,
        "last_abstracts": [],
        "pending_messages": [],
        "knowledge_suggestions": [],
    }


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ("" if value is None else str(value))


def _abstract(raw: Any) -> AbstractEntry | None:
    if not isinstance(raw, Mapping):
        return None
    summary = _str(raw.get("summary")).strip()
    if not summary:
        return None
    cycle = raw.get("cycle")
    outcome = raw.get("outcome")
    entry: AbstractEntry = {
        "time": _str(raw.get("time")),
        "cycle": cycle if isinstance(cycle, int) and not isinstance(cycle, bool) else 0,
        "outcome": outcome if outcome in _OUTCOMES else "success",
        "summary": summary,
    }
    entry_id = _str(raw.get("id")).strip()
    if entry_id:
        entry["id"] = entry_id
    return entry


def _pending(raw: Any) -> PendingMessage | None:
    if not isinstance(raw, Mapping):
        return None
    intent = _str(raw.get("intent")).strip()
    message_id = _str(raw.get("id")).strip()
    if not intent or not message_id:
        return None
    message: PendingMessage = {"id": message_id, "time": _str(raw.get("time")), "intent": intent}
    text = _str(raw.get("text")).strip()
    if text:
        message["text"] = text
    return message


def _suggestion(raw: Any) -> KnowledgeSuggestion | None:
    if not isinstance(raw, Mapping):
        return None
    suggestion_id = _str(raw.get("id")).strip()
    action = raw.get("action")
    title = _str(raw.get("title")).strip()
    if not suggestion_id or action not in SUGGESTION_ACTIONS or not title:
        return None
    suggestion: KnowledgeSuggestion = {
        "id": suggestion_id,
        "time": _str(raw.get("time")),
        "action": action,
        "title": title,
        "reason": _str(raw.get("reason")).strip(),
        "source": _str(raw.get("source")).strip(),
    }
    for key in ("kid", "summary", "body", "user_id"):
        value = _str(raw.get(key)).strip()
        if value:
            suggestion[key] = value
    return suggestion


def normalize_state(raw: Any, *, max_abstracts: int) -> StateData:
    """A well-formed state from stored JSON, keeping the newest ``max_abstracts``."""
    state = empty_state()
    if not isinstance(raw, Mapping):
        return state
    runs = raw.get("total_runs")
    if isinstance(runs, int) and not isinstance(runs, bool) and runs > 0:
        state["total_runs"] = runs
    abstracts = raw.get("last_abstracts")
    if isinstance(abstracts, list):
        entries = [e for e in (_abstract(a) for a in abstracts) if e is not None]
        state["last_abstracts"] = entries[-max_abstracts:]
    pending = raw.get("pending_messages")
    if isinstance(pending, list):
        state["pending_messages"] = [p for p in (_pending(m) for m in pending) if p is not None]
    suggestions = raw.get("knowledge_suggestions")
    if isinstance(suggestions, list):
        state["knowledge_suggestions"] = [
            s for s in (_suggestion(raw) for raw in suggestions) if s is not None
        ]
    return state


@dataclass(eq=False)
class Cycle:
    """The in-memory control block of one running cycle.

    Shared by the runner, the workflow nodes (injected by type through the
    ChatObject's ``hook_args``), the strategy and the tool handlers. It holds
    nothing that outlives the cycle.
    """

    number: int
    compress_history: bool = True
    epoch: int = 0
    """The loop's forget epoch when the cycle began (:class:`~.fence.CycleFence`):
    once a forget of the target user moved it on, the cycle writes nothing."""
    started_at: float = field(default_factory=time.time)
    """Wall-clock seconds when the cycle began: a forget of the target user at or after
    it, in any process (the shared tombstones), fences the cycle too."""
    stop_requested: bool = False
    """``subconscious_iter_stop`` was called: no further model round."""
    stop_summary: str = ""
    interrupted: bool = False
    """The target user spoke (or the bot is stopping): finish the tool calls
    already running, start no new model round and no new tool call."""
    sends: int = 0
    actions: Counter[str] = field(default_factory=Counter)
    """Successful state-changing tool calls, by action name (for the abstract)."""
    usage: SessionUsageProxy | None = None
    """The run's usage ledger, captured by the history node."""
    history_note: str = ""
    group_data: dict[str, Any] = field(default_factory=dict)
    """Scratch space of the tool groups for this cycle, by group name (e.g. the
    knowledge suggestions read in this cycle); dropped with the cycle."""

    def describe_actions(self) -> str:
        """A short Chinese account of what the cycle changed."""
        labels = {
            "write": "新增记忆",
            "update": "修改记忆",
            "delete": "删除记忆",
            "memo": "更新备忘录",
            "send": "发送消息",
            "note": "记下待转达消息",
            "knowledge_create": "新建知识",
            "knowledge_update": "修改知识",
            "knowledge_delete": "删除知识",
            "profile": "修改画像",
        }
        parts = [f"{labels.get(k, k)} {n} 次" for k, n in self.actions.items() if n]
        return "、".join(parts) if parts else "没有修改任何内容"


@dataclass(slots=True)
class CycleResult:
    """What one call of :meth:`SubconsciousRunner.run_cycle` did."""

    number: int
    outcome: CycleOutcome | Literal["skipped"]
    summary: str = ""
    error: str | None = None
    usage: UniResponseUsage[int] | None = None
    seconds: float = 0.0
    actions: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.outcome == "success"
