"""The MemoryBank-CN benchmark through the plugin's own write and read path.

The LoCoMo benchmark's machinery (:mod:`bench.locomo_run`) on Chinese users:
each user's turns are written with ``MemoryTools.write_memory`` at their dates,
every question is asked with ``read_memory`` and, with the same query vector,
by plain cosine over the same stored vectors (e5 query/passage modes).

Then active recall (``active/recall.MemoryRecall``, the ``<MEMORIES>`` block of a
turn, with the default ``recall_top_k`` / ``recall_max_chars``): for every
question, the hits and their similarities, so that the block can be rendered
at any threshold (:func:`in_block`): *related* = a question in its own user's
partition (does the block hold an evidence turn?), *unrelated* = the Chinese
chit-chat lines of :mod:`bench.active_bench` in every partition, and every
question in the next user's partition (another person's memories: any block
is noise).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .active_bench import CJK_CHAT
from .locomo_data import Conversation
from .locomo_run import (
    LOCOMO_STEP,
    Partition,
    RunResult,
    ask_all,
    ask_variants,
    write_all,
)
from .recall_run import build_runtime

if TYPE_CHECKING:
    from amrita_plugin_memory.services import MemoryRuntime

__all__ = ["Hit", "Probe", "RecallResult", "in_block", "run_memorybank"]

TAG = "memorybank"


@dataclass(frozen=True, slots=True)
class Hit:
    """One memory active recall found for a message, best first."""

    date: str
    content: str
    similarity: float
    evidence: bool  # one of the question's evidence turns (always False when unrelated)


@dataclass(frozen=True, slots=True)
class Probe:
    user: int  # index of the partition asked
    text: str
    hits: tuple[Hit, ...]


@dataclass(slots=True)
class RecallResult:
    top_k: int
    max_chars: int
    related: list[Probe] = field(default_factory=list)
    chat: list[Probe] = field(default_factory=list)  # chit-chat lines, every partition
    foreign: list[Probe] = field(default_factory=list)  # questions in another user's partition


def in_block(probe: Probe, threshold: float, max_chars: int) -> tuple[bool, bool]:
    """``(a block is injected, an evidence memory is in it)`` at ``threshold``, rendered
    by the plugin's own ``render_memories_block`` (so ``max_chars`` applies as in a chat)."""
    from amrita_plugin_memory.core.text import single_line
    from amrita_plugin_memory.prompting.blocks import render_memories_block

    shown = [h for h in probe.hits if h.similarity >= threshold]
    block = render_memories_block([(h.date, h.content) for h in shown], max_chars=max_chars)
    found = any(h.evidence and single_line(h.content) in block for h in shown)
    return bool(block), found


async def _probe(
    recall: Any, part: Partition, user: int, text: str, evidence: frozenset[str]
) -> Probe:
    from amrita_plugin_memory.prompting.blocks import memory_date

    found = await recall.recall(part.caller, text)
    hits = tuple(
        Hit(
            memory_date(recall.calendar, r),  # as the real block shows it
            r.content,
            float(sim),
            bool(part.turns.get(r.id, frozenset()) & evidence),
        )
        for r, sim in found
    )
    return Probe(user, text, hits)


async def probe_recall(
    rt: MemoryRuntime, users: Sequence[Conversation], parts: Sequence[Partition]
) -> RecallResult:
    """Active recall's hits for every related and unrelated message (no threshold yet)."""
    from amrita_plugin_memory.active.recall import MemoryRecall
    from amrita_plugin_memory.core.config import ActiveMemoryConfig

    defaults = ActiveMemoryConfig()
    recall = MemoryRecall(
        rt.store,
        calendar=rt.calendar,
        top_k=defaults.recall_top_k,
        max_chars=defaults.recall_max_chars,
        min_similarity=-1.0,  # every hit, with its similarity: thresholds are applied later
        min_similarity_non_cjk=-1.0,
        timeout=30.0,  # a measurement: never cut short by recall's own deadline
    )
    out = RecallResult(defaults.recall_top_k, defaults.recall_max_chars)
    for index, (user, part) in enumerate(zip(users, parts, strict=True)):
        now = user.now.isoformat(timespec="seconds")
        rt.store.clock = lambda s=now: s
        for q in user.questions:
            out.related.append(await _probe(recall, part, index, q.text, q.evidence))
        for line in CJK_CHAT:
            out.chat.append(await _probe(recall, part, index, line, frozenset()))
        if len(users) > 1:
            other = (index + 1) % len(users)
            for q in users[other].questions:
                out.foreign.append(await _probe(recall, part, index, q.text, frozenset()))
    return out


async def run_memorybank(
    users: Sequence[Conversation],
    data_dir: Path,
    embedder: dict[str, Any],
    progress: Callable[[str], None] = lambda _: None,
    variants: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    active_recall: bool = True,
) -> tuple[RunResult, RecallResult | None]:
    """Write, ask (default ranking, dense, ``variants``), then probe active recall."""
    from amrita_plugin_memory.core.records import utc_now

    rt = build_runtime(data_dir, LOCOMO_STEP, embedder)
    out = RunResult()
    recall: RecallResult | None = None
    try:
        parts = await write_all(rt, users, out, progress, tag=TAG)
        progress(f"{out.written} turns written ({out.merged} merged); asking")
        await ask_all(rt, users, parts, out)
        if variants:
            progress(f"asking again with {len(variants)} channel variants")
            await ask_variants(rt, users, parts, out, variants)
        if active_recall:
            progress("active recall")
            recall = await probe_recall(rt, users, parts)
        rt.store.clock = utc_now
    finally:
        await rt.close()
    return out, recall
