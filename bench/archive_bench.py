"""The archive sweep at scale and the event loop (issue 16, "Time").

Fills the memory collection of a real :class:`MemoryRuntime` with ``--total``
expired memories (generated 384-d vectors, ``updated_at`` long past, spread
over ``--partitions`` partitions) plus one fresh partition of 1,000 memories,
then runs one :func:`~amrita_plugin_memory.upkeep.archive.sweep.sweep` while

* a 10 ms ticker measures the event loop's lag (the time a chat turn would
  wait before it even starts), and
* a "chat turn" every 50 ms searches the fresh partition
  (``MemoryStore.query_vector``), timed end to end.

Prints the sweep's rate, lag max / p99 / p50, the turns' latency, and checks
that every memory ended up in the archive (and the fresh ones stayed live).

    nice -n 10 uv run --frozen python -m bench.archive_bench [--total 100000] [--mode served]

``--mode served`` (the default) is local mode as a bot on Linux runs it: the data
directory served by the plugin's child ``chroma run`` process;
``--mode local`` keeps the embedded ChromaDB in this process
(``VECTOR_DB_LOCAL_SERVER=false``), ``--mode remote`` uses a separate server.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import numpy as np

from tests.helpers import view_of

from .harness import bench_env
from .stats import GcProbe, LoopLagProbe, fmt_ms

DIM = 384
FILL_BATCH = 2_000
FRESH = "fresh_partition"
FRESH_SIZE = 1_000
LAG_TARGET = 0.050


def _meta(partition: str, updated_at: str) -> dict[str, Any]:
    return {
        "user_id": partition,
        "scope": "user",
        "tags": "",
        "importance": "medium",
        "created_at": updated_at,
        "updated_at": updated_at,
        "origin": "private",
        "from_group": False,
    }


async def _fill(rt: Any, total: int, partitions: int, rng: np.random.Generator) -> float:
    """Raw adds: ``total`` expired memories, then the fresh partition; items/s."""
    col = await rt.store.collection()
    now = rt.store.clock()
    rows = [
        (f"old{i:07d}", f"p{i % partitions}", "2024-01-01T00:00:00+00:00") for i in range(total)
    ]
    rows += [(f"new{i:05d}", FRESH, now) for i in range(FRESH_SIZE)]
    started = time.perf_counter()
    for start in range(0, len(rows), FILL_BATCH):
        chunk = rows[start : start + FILL_BATCH]
        vecs = rng.standard_normal((len(chunk), DIM), dtype=np.float32)
        await rt.connection.run(
            col.add,
            ids=[i for i, _, _ in chunk],
            embeddings=vecs,
            documents=[f"记忆 {i}" for i, _, _ in chunk],
            metadatas=[_meta(p, at) for _, p, at in chunk],
        )
    rt.store.invalidate()
    return len(rows) / (time.perf_counter() - started)


async def _turns(rt: Any, rng: np.random.Generator, out: list[float], stop: asyncio.Event) -> None:
    """A search of the fresh partition every 50 ms, timed end to end."""
    while not stop.is_set():
        vector = rng.standard_normal(DIM).astype(np.float32).tolist()
        started = time.perf_counter()
        hits = await rt.store.query_vector(view_of(FRESH), vector, top_k=5)
        out.append(time.perf_counter() - started)
        assert len(hits) == 5
        await asyncio.sleep(0.05)


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else 0.0


async def main(total: int, partitions: int, mode: str, batch: int, freeze: bool) -> None:
    rng = np.random.default_rng(16)
    async with bench_env() as env:
        from amrita_plugin_memory.adapters.gc_freeze import freeze_startup_objects
        from amrita_plugin_memory.upkeep.archive.sweep import (
            sweep,  # after NoneBot loaded the plugin
        )

        rt = env.make_runtime(f"archive-{mode}", mode)
        if freeze:
            freeze_startup_objects()  # what the bot does once it has started
        rate = await _fill(rt, total, partitions, rng)
        print(
            f"[archive {mode}] filled {total:,} expired + {FRESH_SIZE:,} fresh at {rate:,.0f} items/s"
        )
        await rt.store.query_vector(
            view_of(FRESH), [0.0] * DIM, top_k=5
        )  # warm the partition index

        probe = LoopLagProbe()
        gc_probe = GcProbe()
        turns: list[float] = []
        stop = asyncio.Event()
        turner = asyncio.create_task(_turns(rt, rng, turns, stop))
        probe.start()
        gc_probe.start()
        started = time.perf_counter()
        result = await sweep(rt.store, rt.config.file.lifetime_days, batch_size=batch)
        elapsed = time.perf_counter() - started
        lag = await probe.stop()
        gc_probe.stop()
        stop.set()
        await turner

        live = await rt.store.count_all()
        archived = await rt.store.archive.count_all()
        ok = result.archived == total and archived == total and live == FRESH_SIZE
        lags = sorted(probe.lags)
        print(
            f"[archive {mode}] sweep: {result.archived:,} archived in {elapsed:.1f} s "
            f"({result.archived / elapsed:,.0f} memories/s, {result.batches} batches of {batch})"
        )
        print(
            f"[archive {mode}] loop lag during the sweep: max {fmt_ms(lag.max)}, "
            f"p99 {fmt_ms(_pct(lags, 99))}, p50 {fmt_ms(lag.p50)} over {lag.n:,} ticks "
            f"(target: max <= {fmt_ms(LAG_TARGET)}) -> {'OK' if lag.max <= LAG_TARGET else 'OVER'}"
        )
        worst, worst_at = probe.worst
        over = sum(1 for x in lags if x > LAG_TARGET)
        gc_near = [d for _, d, end in gc_probe.pauses if abs(end - worst_at) <= worst + 0.02]
        print(
            f"[archive {mode}] ticks over {fmt_ms(LAG_TARGET)}: {over}; the worst ended "
            f"{worst_at - started:.1f} s into the sweep; longest GC pass "
            f"{fmt_ms(gc_probe.longest)} ({len(gc_probe.pauses)} passes), "
            f"at the worst tick: {fmt_ms(max(gc_near, default=0.0))}"
        )
        print(
            f"[archive {mode}] chat-turn searches of a 1,000-memory partition during the sweep: "
            f"{len(turns)} turns, p50 {fmt_ms(_pct(turns, 50))}, p99 {fmt_ms(_pct(turns, 99))}, "
            f"max {fmt_ms(max(turns, default=0.0))}"
        )
        print(
            f"[archive {mode}] check: live {live:,} (fresh {FRESH_SIZE:,}), archive {archived:,} "
            f"-> {'nothing lost' if ok else 'MISMATCH'}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="The archive sweep at scale and the event loop.")
    parser.add_argument("--total", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--mode", choices=("local", "served", "remote"), default="served")
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument(
        "--no-freeze", action="store_true", help="skip gc.freeze() after start-up (the bot does it)"
    )
    args = parser.parse_args()
    asyncio.run(main(args.total, args.partitions, args.mode, args.batch, not args.no_freeze))
