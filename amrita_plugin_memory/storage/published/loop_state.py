"""The published plugin's L3 loop state (its ``payload`` text), converted into this plugin's document.

The published loop keeps one JSON text per row (uid ``amrita_memory``, the same row as this
plugin's loop) with ``total_runs``, ``last_abstracts`` (plain strings), ``last_iter_summary``,
``pending_messages`` (``{content, timestamp}``), ``knowledge_suggestions``
(``{action, title, summary, body, reason, kid, timestamp}``) and the state of its own
scheduler (``penalty``, ``last_run_ts``, ``last_run_time``, ``idle_planner``).

What means the same here is converted: the run count, the abstracts (each cycle's summary;
the last ``subconscious_iter_stop`` summary becomes the newest), the queued knowledge
suggestions, and the pending messages: the published loop queues what it tried to send
the user (sent or not, it cannot tell) and shows it to the chat model in the user's next
turn, which is what this loop's pending messages are (the newest :data:`PENDING_KEEP`).
What cannot mean the same is dropped and named in the notes, which the migration logs:
its scheduler state (this loop plans its runs otherwise) and keys it does not know.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["PENDING_KEEP", "convert_loop_state"]

_CONVERTED = frozenset(
    {
        "total_runs",
        "last_abstracts",
        "last_iter_summary",
        "knowledge_suggestions",
        "last_run_time",
        "pending_messages",
    }
)
_SCHEDULER = ("penalty", "last_run_ts", "idle_planner")
_ACTIONS = ("create", "update", "delete")
PENDING_KEEP = 10
"""The loop's bound on waiting messages (``subconscious.consts.PENDING_MAX``)."""


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def _abstracts(doc: dict[str, Any], total_runs: int) -> list[dict[str, Any]]:
    time = _text(doc.get("last_run_time"))
    raw = doc.get("last_abstracts")
    summaries = [_text(a) for a in raw if _text(a)] if isinstance(raw, list) else []
    last = _text(doc.get("last_iter_summary"))
    if last and last not in summaries:
        summaries.append(last)
    entries = [
        {"time": time, "cycle": 0, "outcome": "success", "summary": summary}
        for summary in summaries
    ]
    if entries:
        entries[-1]["cycle"] = total_runs  # the newest is the last run's
    return entries


def _pending(raw: Any) -> list[dict[str, Any]]:
    out = [
        {"id": f"published{n + 1:04d}", "time": _text(item.get("timestamp")), "intent": text}
        for n, item in enumerate(raw if isinstance(raw, list) else [])
        if isinstance(item, dict) and (text := _text(item.get("content")))
    ]
    return out[-PENDING_KEEP:]


def _suggestions(raw: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for n, item in enumerate(raw if isinstance(raw, list) else []):
        if not isinstance(item, dict):
            continue
        action, title = item.get("action"), _text(item.get("title"))
        if action not in _ACTIONS or not title:
            continue
        suggestion: dict[str, Any] = {
            "id": f"published{n + 1:04d}",
            "time": _text(item.get("timestamp")),
            "action": action,
            "title": title,
            "reason": _text(item.get("reason")),
            "source": "",  # the published plugin did not record the chat
        }
        for key in ("kid", "summary", "body"):
            if value := _text(item.get(key)):
                suggestion[key] = value
        out.append(suggestion)
    return out


def convert_loop_state(payload: Any) -> tuple[dict[str, Any], list[str]]:
    """This plugin's state document for a published ``payload``, and what was dropped.

    Never raises: a payload that is not a JSON object becomes an empty state, with a
    note saying so.
    """
    notes: list[str] = []
    try:
        doc = json.loads(payload) if isinstance(payload, str) else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        notes.append(f"状态文本无法解析（{str(payload)[:60]!r}），循环状态已重置")
        doc = {}
    runs = doc.get("total_runs")
    total_runs = runs if isinstance(runs, int) and not isinstance(runs, bool) and runs > 0 else 0
    data: dict[str, Any] = {
        "total_runs": total_runs,
        "last_abstracts": _abstracts(doc, total_runs),
        "pending_messages": _pending(doc.get("pending_messages")),
        "knowledge_suggestions": _suggestions(doc.get("knowledge_suggestions")),
    }
    pending = doc.get("pending_messages")
    lost = (len(pending) if isinstance(pending, list) else 0) - len(data["pending_messages"])
    if lost > 0:
        notes.append(
            f"丢弃 {lost} 条 pending_messages（空的、无法识别的，或超出 {PENDING_KEEP} 条的较早消息）"
        )
    scheduler = [k for k in _SCHEDULER if k in doc]
    if scheduler:
        notes.append(f"丢弃调度状态 {', '.join(scheduler)}：本插件的循环另行安排运行时间")
    unknown = sorted(k for k in doc if k not in _CONVERTED and k not in _SCHEDULER)
    if unknown:
        notes.append(f"丢弃未知的键 {', '.join(unknown)}")
    raw_suggestions = doc.get("knowledge_suggestions")
    dropped = (len(raw_suggestions) if isinstance(raw_suggestions, list) else 0) - len(
        data["knowledge_suggestions"]
    )
    if dropped > 0:
        notes.append(f"丢弃 {dropped} 条无法识别的知识建议")
    return data, notes
