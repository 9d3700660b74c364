"""The LoCoMo benchmark through the plugin's own write and read path.

Each conversation's observations become one user's memories, written oldest
first with ``MemoryTools.write_memory`` while the store's clock shows the
session's date (so age decay sees a real user's history; dedup on write is
on, as by default: an observation merged into an earlier memory gives that
memory its turns too). Then the store's clock is set to the conversation's
``now`` (a day after its last session) and every question is asked with
``MemoryTools.read_memory`` (``top_k`` :data:`TOP_K`), the search a chat model
gets. In the same pass, with the very vector ``read_memory`` embedded, the
plain dense baseline ranks the same partition's stored vectors by cosine
(e5 query/passage modes): same model, same memories, no keyword channel, no
decay, no rules.

A hit is a memory holding an observation of one of the question's evidence turns.

With ``variants`` (``--channels`` of the benchmarks) the same questions are
asked again, on the same stored memories, with some of the ranking's channels
switched off (:data:`CHANNEL_VARIANTS`): what each channel adds over plain
cosine, per yardstick. The MemoryBank-CN benchmark (:mod:`bench.memorybank_run`)
runs the same machinery on its Chinese users.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tests.helpers import view_of

from .locomo_data import Conversation
from .recall_run import EmbedTimer, Step, build_runtime

if TYPE_CHECKING:
    from amrita_plugin_memory.services import MemoryRuntime
    from amrita_plugin_memory.storage.scope import Scope

__all__ = [
    "BASE_UID",
    "CHANNEL_VARIANTS",
    "LOCOMO_STEP",
    "PER_SCRIPT",
    "TOP_K",
    "Answer",
    "Partition",
    "RunResult",
    "ask_all",
    "ask_variants",
    "load_vectors",
    "run_locomo",
    "write_all",
]

BASE_UID = 400_000  # QQ number of the first conversation's user
TOP_K = 10
LOCOMO_STEP = Step("locomo", "e5", hybrid=True, dedup=True, decay=False)
"""The plugin's default ranking (hybrid, dedup on write, no decay: ``[decay] enabled`` is
off by default), e5 query/passage modes."""

PER_SCRIPT = "per_script"
"""A key of a variant: keep the default's per-script channels (see :data:`CHANNEL_VARIANTS`)."""

CHANNEL_VARIANTS: dict[str, dict[str, Any]] = {
    "vector only": {"hybrid": False, "decay": False, "time_weight": 0.0},
    "+keywords": {"hybrid": True, "decay": False, "time_weight": 0.0},
    "+decay": {"hybrid": False, "decay": True, "time_weight": 0.0},
    "+keywords +decay": {"hybrid": True, "decay": True, "time_weight": 0.0},
    "+time": {"hybrid": False, "decay": False},
    "default without time": {PER_SCRIPT: True, "time_weight": 0.0},
    "default +decay": {PER_SCRIPT: True, "decay": True},
}
"""Changes to ``RetrievalSettings`` (from the default): what each channel does on its own.
Unless a variant says :data:`PER_SCRIPT`, every script gets all channels (the keyword
channel's CJK terms at ``ranking/keywords.CJK_UNIT``), so a variant measures a channel
in every language; the default ranking (the last row of the report) uses the channels
of the query's script."""


@dataclass(frozen=True, slots=True)
class Answer:
    """One question's outcome: 1-based rank of the first evidence memory (``None``: not in
    the top :data:`TOP_K`) for the plugin's ranking and for the dense baseline."""

    conversation: int  # index in the run's list of conversations
    category: int
    rank: int | None
    dense: int | None


@dataclass(slots=True)
class Partition:
    """One conversation's memories as stored: ids, their stored vectors, their turns."""

    caller: Scope
    turns: dict[str, frozenset[str]] = field(default_factory=dict)
    ids: list[str] = field(default_factory=list)
    vectors: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))

    def dense(self, query: Sequence[float], k: int) -> list[str]:
        """The ``k`` memories closest to ``query`` by cosine (ties: id order)."""
        q = np.asarray(query, dtype=np.float32)
        sims = self.vectors @ (q / (np.linalg.norm(q) or 1.0))
        return [self.ids[i] for i in np.argsort(-sims, kind="stable")[:k]]

    def rank(self, ids: Sequence[str], evidence: frozenset[str]) -> int | None:
        for pos, memory_id in enumerate(ids, start=1):
            if self.turns.get(memory_id, frozenset()) & evidence:
                return pos
        return None


@dataclass(slots=True)
class RunResult:
    answers: list[Answer] = field(default_factory=list)
    written: int = 0  # observations written
    merged: int = 0  # of them merged into an earlier memory (dedup on write)
    memories: list[int] = field(default_factory=list)  # per conversation
    embed_s: list[float] = field(default_factory=list)  # the embedding call of each read
    search_s: list[float] = field(default_factory=list)  # the rest of each read_memory
    leaks: list[str] = field(default_factory=list)  # "question -> foreign id"
    variants: dict[str, list[Answer]] = field(default_factory=dict)  # by CHANNEL_VARIANTS name


class QueryCapture(EmbedTimer):
    """Times the runtime's real ``embed`` and keeps the last query vector (for the baseline)."""

    def __init__(self, rt: MemoryRuntime) -> None:
        super().__init__(rt)
        self.query: list[float] = []

    async def _timed(self, texts: Sequence[str], kind: Any = "document") -> list[list[float]]:
        vectors = await super()._timed(texts, kind)
        if kind == "query" and vectors:
            self.query = vectors[0]
        return vectors


def _caller(index: int) -> Scope:
    from amrita_plugin_memory.storage.keys import target_from_ids
    from amrita_plugin_memory.storage.scope import Scope

    return Scope.of_loop(target_from_ids(str(BASE_UID + index)))


async def _write(
    rt: MemoryRuntime, conv: Conversation, index: int, out: RunResult, tag: str
) -> Partition:
    part = Partition(_caller(index))
    turns: dict[str, set[str]] = {}
    for obs in conv.observations:
        stamp = obs.when.isoformat(timespec="seconds")
        rt.store.clock = lambda s=stamp: s
        result = await rt.tools.write_memory(part.caller, {"content": obs.text, "tags": [tag]})
        if not result.get("ok"):
            raise RuntimeError(f"write_memory failed in {conv.name}: {result}")
        out.written += 1
        out.merged += bool(result.get("merged"))
        turns.setdefault(str(result["memory"]["id"]), set()).update(obs.turns)
    part.turns = {memory_id: frozenset(t) for memory_id, t in turns.items()}
    await load_vectors(rt, part)
    out.memories.append(len(part.ids))
    return part


async def load_vectors(rt: MemoryRuntime, part: Partition) -> None:
    """Every memory of the partition and its stored vector (normalised) for the dense baseline."""
    partition = part.caller.target.user
    async for page in rt.store.iter_records(view_of(partition)):
        part.ids.extend(r.id for r in page)
    rows = []
    for memory_id in part.ids:
        vector = await rt.store.stored_vector(view_of(partition), memory_id)
        if vector is None:
            raise RuntimeError(f"memory {memory_id} of {partition} has no stored vector")
        rows.append(vector)
    matrix = np.asarray(rows, dtype=np.float32)
    part.vectors = matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)


async def write_all(
    rt: MemoryRuntime,
    convs: Sequence[Conversation],
    out: RunResult,
    progress: Callable[[str], None] = lambda _: None,
    *,
    tag: str = "locomo",
) -> list[Partition]:
    """Write every conversation's observations into its own user's partition."""
    parts = []
    for index, conv in enumerate(convs):
        parts.append(await _write(rt, conv, index, out, tag))
        progress(f"{conv.name}: {len(conv.observations)} observations written")
    return parts


async def ask_all(
    rt: MemoryRuntime,
    convs: Sequence[Conversation],
    parts: Sequence[Partition],
    out: RunResult,
    answers: list[Answer] | None = None,
) -> None:
    """Ask every question through ``read_memory`` and the dense baseline (into
    ``answers``, by default ``out.answers``)."""
    answers = out.answers if answers is None else answers
    capture = QueryCapture(rt)
    try:
        for index, (conv, part) in enumerate(zip(convs, parts, strict=True)):
            now = conv.now.isoformat(timespec="seconds")
            rt.store.clock = lambda s=now: s
            # Uncounted: the partition's in-process index is built on first use.
            await rt.tools.read_memory(part.caller, {"query": "warm-up", "top_k": TOP_K})
            own = set(part.ids)
            for q in conv.questions:
                capture.seconds = 0.0
                started = time.perf_counter()
                result = await rt.tools.read_memory(part.caller, {"query": q.text, "top_k": TOP_K})
                total = time.perf_counter() - started
                if not result.get("ok"):
                    raise RuntimeError(f"read_memory failed in {conv.name}: {result}")
                out.embed_s.append(capture.seconds)
                out.search_s.append(total - capture.seconds)
                got = [str(m["id"]) for m in result["memories"]]
                out.leaks.extend(f"{q.text} -> {i}" for i in got if i not in own)
                dense = part.dense(capture.query, TOP_K)
                answers.append(
                    Answer(
                        index, q.category, part.rank(got, q.evidence), part.rank(dense, q.evidence)
                    )
                )
    finally:
        capture.restore()


async def ask_variants(
    rt: MemoryRuntime,
    convs: Sequence[Conversation],
    parts: Sequence[Partition],
    out: RunResult,
    variants: Mapping[str, Mapping[str, Any]],
) -> None:
    """Ask again with each variant's ``RetrievalSettings`` changes (then the default again)."""
    from amrita_plugin_memory.ranking.keywords import CJK_UNIT
    from amrita_plugin_memory.storage.partition.retrieval import ScriptRanking

    default = rt.store.settings
    every = ScriptRanking(cjk_unit=CJK_UNIT)
    try:
        for name, variant in variants.items():
            changes = {k: v for k, v in variant.items() if k != PER_SCRIPT}
            if not variant.get(PER_SCRIPT):
                changes = {"cjk": every, "other": every, **changes}
            rt.store.settings = replace(default, **changes)
            out.variants[name] = []
            await ask_all(rt, convs, parts, out, out.variants[name])
    finally:
        rt.store.settings = default


async def run_locomo(
    convs: Sequence[Conversation],
    data_dir: Path,
    embedder: dict[str, Any],
    progress: Callable[[str], None] = lambda _: None,
    variants: Mapping[str, Mapping[str, Any]] | None = None,
) -> RunResult:
    """Write, then ask, on a fresh runtime on ``data_dir`` (the plugin must be importable)."""
    from amrita_plugin_memory.core.records import utc_now

    rt = build_runtime(data_dir, LOCOMO_STEP, embedder)
    out = RunResult()
    try:
        parts = await write_all(rt, convs, out, progress)
        progress(f"{out.written} observations written ({out.merged} merged); asking")
        await ask_all(rt, convs, parts, out)
        if variants:
            progress(f"asking again with {len(variants)} channel variants")
            await ask_variants(rt, convs, parts, out, variants)
        rt.store.clock = utc_now
    finally:
        await rt.close()
    return out
