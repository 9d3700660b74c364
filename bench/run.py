"""Run every benchmark of issue 7 and print one table.

    uv run --frozen python -m bench.run            # full: 100,000 memories (~8 min)
    uv run --frozen python -m bench.run --quick    # smoke test: 2,000 memories (< 1 min)

Options: ``--modes local,remote`` (default; ``served`` = local mode through the
plugin's child ``chroma run``), ``--keep`` (keep the work dir).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import platform
import sys
import time

from .analysis import explain
from .common import ModeContext, uid_of
from .data import FULL, QUICK, make_dataset
from .harness import bench_env
from .memo_bench import bench_memo
from .reembed_bench import bench_concurrent_reads, bench_reembed, bench_startup
from .stats import Row, format_table, load_average
from .vector_bench import bench_by_id, bench_physical_limit, bench_read, bench_write, fill


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.run", description="amrita_plugin_memory benchmarks (issue 7)"
    )
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    parser.add_argument(
        "--modes",
        default="local,remote",
        help="local (in-process Chroma), remote, served (local mode through the child "
        "chroma run the plugin starts on Linux); default local,remote",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary work directory")
    args = parser.parse_args(argv)
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not set(args.modes) <= {"local", "remote", "served"}:
        parser.error("--modes takes local, remote and/or served")
    return args


def _progress(message: str, started: float) -> None:
    print(f"[bench {time.perf_counter() - started:7.1f} s] {message}", file=sys.stderr, flush=True)


async def run(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    scale = QUICK if args.quick else FULL
    started = time.perf_counter()
    rows: list[Row] = []
    facts: dict[str, float] = {}
    loads = [load_average()]
    async with bench_env(keep=args.keep) as env:
        from amrita_plugin_memory.storage.keys import user_key

        _progress(f"NoneBot up, work dir {env.work}; generating {scale.total:,} memories", started)
        ds = make_dataset(scale, lambda i: user_key(uid_of(i)))
        # The synthetic data set lives in this process only because it is a
        # benchmark; a bot never holds it. Keep it out of the GC's full passes,
        # which would otherwise scan it on the event loop (measured: 240 ms).
        gc.collect()
        gc.freeze()
        _progress(f"vectors computed in {ds.seconds:.1f} s; item 5 (memo)", started)
        await bench_memo(rows, hits=20 * scale.reps * 10, misses=scale.reps * 4)
        for mode in args.modes:
            rt = env.make_runtime(mode, mode, batch_size=scale.batch)
            col = await rt.store.collection()
            ctx = ModeContext(mode, scale, rt, col, ds, rows, facts=facts)
            _progress(f"[{mode}] filling {scale.total:,} memories (raw adds)", started)
            await fill(ctx)
            _progress(f"[{mode}] item 1 (read_memory)", started)
            await bench_read(ctx)
            _progress(f"[{mode}] item 2 (by id)", started)
            await bench_by_id(ctx)
            _progress(f"[{mode}] item 8 (physical limit)", started)
            await bench_physical_limit(ctx)
            _progress(f"[{mode}] item 6 (startup check)", started)
            await bench_startup(ctx, reps=max(5, scale.reps // 5))
            _progress(f"[{mode}] item 7 (concurrent reads)", started)
            await bench_concurrent_reads(ctx)
            _progress(f"[{mode}] item 3 (writes)", started)
            await bench_write(ctx)
            _progress(f"[{mode}] item 4 (re-embedding) + item 7 (lag during reindex)", started)
            await bench_reembed(ctx, env.embed.url)
            loads.append(load_average())
    rows.sort(key=lambda r: (int(r.item), r.mode != "sqlite", r.mode))
    elapsed = time.perf_counter() - started
    print()
    print(
        f"amrita_plugin_memory benchmarks — {scale.name} scale: {scale.total:,} memories in "
        f"{scale.partitions} partitions, {ds.vectors.shape[1]}-dim, batch {scale.batch}; "
        f"modes {', '.join(args.modes)}"
    )
    print(
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} CPUs; {' → '.join(loads)}; total {elapsed:.0f} s"
    )
    print(
        "Side-by-side ratios compare p50s (item 3: mean throughput); absolute latency targets "
        "use p95, lag targets the max."
    )
    print()
    print(format_table(rows))
    print()
    for line in explain(rows, facts, scale):
        print(line)
    failed = [r for r in rows if r.verdict == "FAIL"]
    return 1 if failed else 0


def main() -> None:
    sys.exit(asyncio.run(run()))


if __name__ == "__main__":
    main()
