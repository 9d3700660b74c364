"""The console's overview: what ``ambot memory status`` shows, plus the L3 loop and group awareness.

The store part is :func:`..embedding.collect_status` itself (the same report
the command line prints, through :func:`..embedding.report_json.status_json`),
kept for ``ttl`` seconds because it scans every memory's metadata (about 3 s
at 100,000 memories); ``ambot memory status`` against a running bot asks for
a fresh one. The L3 and group-awareness parts are read live (cheap).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ..core.config import ConfigFile
from ..core.records import GroupPrivacy
from ..embedding import collect_status
from ..embedding.maintenance import Maintenance
from ..embedding.report_json import status_json
from ..subconscious.runner import SubconsciousRunner

__all__ = ["StatusCache", "group_awareness_json", "l3_json"]


class StatusCache:
    """:func:`collect_status` as JSON, at most ``ttl`` seconds old, never computed twice at once."""

    def __init__(self, maint: Maintenance, *, ttl: float = 30.0) -> None:
        self.maint = maint
        self.ttl = ttl
        self._value: tuple[float, dict[str, Any]] | None = None
        self._generation = 0
        self._lock = asyncio.Lock()

    def invalidate(self) -> None:
        """Drop the report; one being computed now is not kept (it may be stale)."""
        self._value = None
        self._generation += 1

    async def get(self, *, fresh: bool = False) -> dict[str, Any]:
        asked = time.monotonic()
        async with self._lock:
            if self._value is not None:
                taken, value = self._value
                if taken >= asked or (not fresh and time.monotonic() - taken <= self.ttl):
                    return value
            generation = self._generation
            report = await collect_status(self.maint)
            value = status_json(report, self.maint.backup_dir)
            if generation == self._generation:
                self._value = (time.monotonic(), value)
            return value


def l3_json(runner: SubconsciousRunner | None, file: ConfigFile) -> dict[str, Any]:
    """The L3 loop's state: planning, counters, abstracts, pending notes, suggestions."""
    config = file.subconscious
    if runner is None:
        return {
            "enabled": False,
            "configured": config.enabled,
            "target_user_id": config.target_user_id.strip() or None,
        }
    state = runner.state
    try:
        next_run = runner.next_run_time
    except Exception:  # the scheduler is not running (e.g. during shutdown)
        next_run = None
    cycle = runner.current_cycle
    return {
        "enabled": True,
        "configured": True,
        "target_user_id": runner.target_user_id,
        "active": runner.active,
        "penalty": runner.penalty,
        "next_run": next_run.isoformat(timespec="seconds") if next_run else None,
        "cycle_running": cycle.number if cycle is not None else None,
        "total_runs": state["total_runs"],
        "last_abstracts": list(state["last_abstracts"]),
        "pending_notes": [
            {"id": m["id"], "time": m["time"], "intent": m["intent"]}
            for m in state["pending_messages"]
        ],
        "suggestions": len(state["knowledge_suggestions"]),
        "knowledge_enabled": runner.knowledge is not None,
    }


def group_awareness_json(file: ConfigFile) -> dict[str, Any]:
    """What the group-awareness features are set to (their switches and limits)."""
    privacy = GroupPrivacy.from_config(file)  # the rule's switches are read in one place
    return {
        "group_context": file.group_context.enabled,
        "context_message_count": file.group_context.context_message_count,
        "anonymize": file.group_context.anonymize,
        "persona": file.persona.enabled,
        "persona_learning": file.persona.update_enabled,
        "self_memory_max_chars": file.self_memory.max_chars,
        "group_memo_editors": file.group_memo_editors,
        "private_memories_in_groups": privacy.private_memories_in_groups,
        "group_memories_across_groups": privacy.group_memories_across_groups,
    }
