"""The time benchmark through the plugin's own read path: each question asked at its own "now".

A *unit* is one user's memories (a LoCoMo conversation, a user of a time set). Its
memories come in dated through :func:`bench.time_import.import_file` (the import's JSON
Lines); then, per question, the runtime's clock and the owner's calendar are set to the
question's now (:func:`bench.time_import.set_now`) and it is asked

* through ``MemoryTools.read_memory`` (``top_k`` :data:`TOP_K`) with the default ranking
  (``default``), and again with the ranking's time channel off (``no time channel``), when
  the settings have one;
* through active recall, ``MemoryRecall.recall`` (top :data:`RECALL_TOP_K`, the default
  similarity floors) and its ``<MEMORIES>`` block (the dates it shows);
* by plain cosine over the unit's stored vectors with the very query vector read_memory
  embedded (``dense``: same model, no keyword channel, no time, no rules).

Ranks are of the first answer memory; the date "shown" is what a reader sees beside a memory:
the first ten characters of ``created_at`` in read_memory's answer, the bracketed date of its
line in the block.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .locomo_run import LOCOMO_STEP, Partition, load_vectors
from .recall_run import build_runtime
from .time_data import first_rank, link_order, newest_first, shown_in_top, topic_first
from .time_import import import_file, set_now, write_jsonl

if TYPE_CHECKING:
    from datetime import datetime

    from amrita_plugin_memory.active.recall import MemoryRecall
    from amrita_plugin_memory.services import MemoryRuntime

__all__ = ["RANKINGS", "Asked", "Question", "Unit", "run_units"]

TOP_K = 10
RECALL_TOP_K = 5
DENSE, DEFAULT, NO_TIME, RECALL, LINKED = (
    "dense",
    "default",
    "no time channel",
    "active recall",
    "default + link (simulated)",
)
RANKINGS = (DENSE, DEFAULT, NO_TIME, RECALL)
SHOWN_READ, SHOWN_BLOCK = "read_memory", "<MEMORIES>"
_LINE = re.compile(r"^- \[(\d{4}-\d{2}-\d{2})[^\]]*\] (.*)$")


@dataclass(frozen=True, slots=True)
class Question:
    """One question of a unit: when it is asked, and the keys of the memories that answer it."""

    text: str
    now: datetime
    answers: frozenset[str]  # memory keys of the unit
    group: str  # LoCoMo category ("2 temporal"), or the set's kind
    lang: str = "en"
    counter: bool = False  # a counter-example memory is on its topic (in its period)
    newest: bool = False  # a "now" question of an evolving fact (link measured)


@dataclass(frozen=True, slots=True)
class Unit:
    """One user's dated memories (keys in import order) and questions."""

    user_id: str
    split: str
    keys: tuple[str, ...]
    rows: tuple[dict[str, Any], ...]  # the import's lines, in the order of ``keys``
    said_day: Mapping[str, str]  # key -> local day it was said (ISO)
    questions: tuple[Question, ...]
    topic: Mapping[str, str] = field(default_factory=dict)  # key -> topic
    supersedes: Mapping[str, str] = field(default_factory=dict)  # newer key -> older key


@dataclass(slots=True)
class Asked:
    """One question's outcome: rank per ranking, and the yes/no scores that apply to it."""

    unit: int
    split: str
    group: str
    lang: str
    counter: bool
    ranks: dict[str, int | None] = field(default_factory=dict)
    topic_first: dict[str, bool] = field(default_factory=dict)
    shown: dict[str, bool] = field(default_factory=dict)  # SHOWN_READ / SHOWN_BLOCK
    newest: dict[str, bool] = field(default_factory=dict)


class QueryCache:
    """Wraps the runtime's real ``embed``: one question's query text is embedded once for all
    the rankings (the vector is the same), and the last query vector is kept for ``dense``."""

    def __init__(self, rt: MemoryRuntime) -> None:
        self.embedder = rt.embedder
        self.original = rt.embedder.embed
        self.vectors: dict[str, list[float]] = {}
        self.last: list[float] = []
        self.embedder.embed = self._embed  # type: ignore[method-assign]

    async def _embed(self, texts: Sequence[str], kind: Any = "document") -> list[list[float]]:
        if kind != "query" or len(texts) != 1:
            return await self.original(texts, kind)
        text = texts[0]
        if text not in self.vectors:
            self.vectors[text] = (await self.original([text], kind))[0]
        self.last = self.vectors[text]
        return [self.last]

    def restore(self) -> None:
        self.embedder.embed = self.original  # type: ignore[method-assign]


def _recaller(rt: MemoryRuntime) -> MemoryRecall:
    """Active recall as ``ActiveMemory`` builds it from the configuration, top 5."""
    from amrita_plugin_memory.active.recall import MemoryRecall

    am = rt.config.file.active_memory
    return MemoryRecall(
        rt.store,
        top_k=RECALL_TOP_K,
        max_chars=am.recall_max_chars,
        min_similarity=am.recall_min_similarity,
        min_similarity_non_cjk=am.recall_min_similarity_non_cjk,
        cross_script_lift=am.recall_cross_script_lift,
        calendar=rt.calendar,
        timeout=30.0,  # a loaded 2-core machine: measure the ranking, not the deadline
    )


def _block_dates(block: str, ids: Sequence[str], content: Mapping[str, str]) -> dict[str, str]:
    """The date the block shows beside each recalled memory (its line found by its text)."""
    by_text = {}
    for line in block.splitlines():
        if m := _LINE.match(line.strip()):
            by_text[m[2].strip()] = m[1]
    out = {}
    for memory_id in ids:
        text = " ".join(content.get(memory_id, "").split())
        date = by_text.get(text) or next(
            (d for t, d in by_text.items() if text.startswith(t.rstrip("…"))), None
        )
        if date is not None:
            out[memory_id] = date
    return out


@dataclass(slots=True)
class _Ctx:
    rt: MemoryRuntime
    part: Partition
    cache: QueryCache
    recaller: MemoryRecall
    leaks: list[str]


async def _read(ctx: _Ctx, text: str) -> tuple[list[str], dict[str, str]]:
    result = await ctx.rt.tools.read_memory(ctx.part.caller, {"query": text, "top_k": TOP_K})
    if not result.get("ok"):
        raise RuntimeError(f"read_memory failed: {result}")
    got = [str(m["id"]) for m in result["memories"]]
    own = set(ctx.part.ids)
    ctx.leaks.extend(f"{text} -> {i}" for i in got if i not in own)
    show = ctx.rt.calendar.show_date  # the owner's day, whatever form the answer shows
    return got, {str(m["id"]): show(str(m.get("created_at", ""))) for m in result["memories"]}


async def _ask(ctx: _Ctx, unit: Unit, index: int, q: Question, ids: Mapping[str, str]) -> Asked:
    """``ids``: key -> stored id. Scores are computed on stored ids."""
    rt, part = ctx.rt, ctx.part
    set_now(rt, q.now)
    answers = frozenset(ids[k] for k in q.answers)
    said = {ids[k]: d for k, d in unit.said_day.items()}
    topic = {ids[k]: t for k, t in unit.topic.items()}
    links = {ids[n]: ids[o] for n, o in unit.supersedes.items()}
    asked = Asked(index, unit.split, q.group, q.lang, q.counter)
    lists: dict[str, list[str]] = {}
    lists[DEFAULT], shown = await _read(ctx, q.text)
    asked.shown[SHOWN_READ] = shown_in_top(lists[DEFAULT], answers, shown, said)
    lists[DENSE] = part.dense(ctx.cache.last, TOP_K)
    default = rt.store.settings
    if "time_weight" in {f.name for f in fields(default)}:
        rt.store.settings = replace(default, time_weight=0.0)
        try:
            lists[NO_TIME], _ = await _read(ctx, q.text)
        finally:
            rt.store.settings = default
    recalled = [r.id for r, _ in await ctx.recaller.recall(part.caller, q.text)]
    lists[RECALL] = recalled
    block = await ctx.recaller.block(part.caller, q.text)
    content = {ids[k]: str(r["content"]) for k, r in zip(unit.keys, unit.rows, strict=True)}
    dates = _block_dates(block, recalled, content)
    asked.shown[SHOWN_BLOCK] = shown_in_top(
        [i for i in recalled if i in dates], answers, dates, said
    )
    if q.newest:
        lists[LINKED] = link_order(lists[DEFAULT], links)
    for name, got in lists.items():
        asked.ranks[name] = first_rank(got, answers)
        if topic:
            asked.topic_first[name] = topic_first(got, answers, topic)
        if q.newest:
            asked.newest[name] = newest_first(got, answers, links)
    return asked


async def run_units(
    units: Sequence[Unit],
    data_dir: Path,
    embedder: dict[str, Any],
    zone: str,
    progress: Callable[[str], None] = lambda _: None,
) -> tuple[list[Asked], list[str]]:
    """Import every unit's memories, then ask its questions; a fresh runtime on ``data_dir``."""
    from amrita_plugin_memory.core.records import utc_now
    from amrita_plugin_memory.storage.keys import target_from_ids
    from amrita_plugin_memory.storage.scope import Scope

    rt = build_runtime(data_dir, LOCOMO_STEP, embedder, zone=zone)
    out: list[Asked] = []
    leaks: list[str] = []
    try:
        stored: list[tuple[Partition, dict[str, str]]] = []
        for index, unit in enumerate(units):
            path = write_jsonl(data_dir / "import" / f"{index:03d}.jsonl", unit.rows)
            new_ids = await import_file(rt, path)
            part = Partition(Scope.of_loop(target_from_ids(unit.user_id)))
            await load_vectors(rt, part)
            by_key = dict(zip(unit.keys, new_ids, strict=True))
            for newer, older in unit.supersedes.items():  # as the writer links them
                await rt.store.link_versions(
                    part.caller.partition("user"), by_key[older], by_key[newer]
                )
            stored.append((part, by_key))
        progress(f"{sum(len(u.keys) for u in units)} memories of {len(units)} users imported")
        cache = QueryCache(rt)
        recaller = _recaller(rt)
        try:
            for index, (unit, (part, ids)) in enumerate(zip(units, stored, strict=True)):
                ctx = _Ctx(rt, part, cache, recaller, leaks)
                for q in unit.questions:
                    out.append(await _ask(ctx, unit, index, q, ids))
                cache.vectors.clear()
        finally:
            cache.restore()
        rt.store.clock = utc_now
    finally:
        await rt.close()
    return out, leaks
