"""The per-partition vector index against Chroma's filtered query (issue 16, "Scale").

Fills one collection of a real :class:`MemoryRuntime` with generated 384-d
vectors (``--total`` memories over ``--partitions`` partitions, three of which
hold 10 / 1,000 / 10,000 memories), then times the vector stage of a search
(``MemoryStore.query_vector``, index warm) and the raw ``collection.query(where=
user_id == partition)`` alternately in the same loop, and checks every answer.

    uv run --frozen python -m bench.index_bench [--total 100000] [--partitions 1000] [--mode local]

The issue's scale run is ``--total 1000000 --partitions 10000`` (once with
``--mode local``, once with ``--mode remote``): filling takes most of the time
(Chroma's own add, ~300-1,000 memories/s on a shared 2-core machine, printed
as it goes), so run it with ``nice``. Chroma's filtered HNSW search is
approximate in large partitions: a query whose ids differ is checked to be no
worse than Chroma's rank by rank and counted as "Chroma-approx". ``--sweep N``
then searches N filler partitions one after the other and prints the cache's
largest size against its budget (and the process's RSS).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import numpy as np

from tests.helpers import view_of

from .harness import bench_env
from .stats import Summary, fmt_ms

DIM = 384
TARGETS = {"size10": 10, "size1000": 1_000, "size10000": 10_000}
BATCH = 2_000


def _meta(partition: str, k: int) -> dict[str, Any]:
    return {
        "user_id": partition,
        "scope": "user",
        "tags": "",
        "importance": ("low", "medium", "high")[k % 3],
        "created_at": "2026-01-01T00:00:00+00:00",
        "updated_at": "2026-01-01T00:00:00+00:00",
        "origin": "private",
        "from_group": False,
    }


def _plan(total: int, partitions: int) -> list[tuple[str, int]]:
    rest = total - sum(TARGETS.values())
    fillers = partitions - len(TARGETS)
    plan = list(TARGETS.items())
    plan += [(f"p{i}", rest // fillers + (1 if i < rest % fillers else 0)) for i in range(fillers)]
    return plan


async def _fill(rt: Any, total: int, partitions: int, rng: np.random.Generator) -> float:
    col = await rt.store.collection()
    ids: list[str] = []
    metas: list[dict[str, Any]] = []
    started = time.perf_counter()

    async def flush() -> None:
        vecs = rng.standard_normal((len(ids), DIM), dtype=np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        docs = [f"记忆 {i}" for i in ids]
        await rt.connection.run(col.add, ids=ids, embeddings=vecs, documents=docs, metadatas=metas)
        ids.clear()
        metas.clear()

    n = 0
    for partition, size in _plan(total, partitions):
        for k in range(size):
            ids.append(f"{partition}-{k}")
            metas.append(_meta(partition, k))
            n += 1
            if len(ids) >= BATCH:
                await flush()
                print(f"\r  filled {n:,}/{total:,}", end="", flush=True)
    if ids:
        await flush()
    print()
    return time.perf_counter() - started


async def _measure(rt: Any, partition: str, reps: int, rng: np.random.Generator) -> dict[str, Any]:
    col = await rt.store.collection()
    store = rt.store
    started = time.perf_counter()
    await store.query_vector(
        view_of(partition), [0.0] * DIM, top_k=5
    )  # first use: loads the partition
    load = time.perf_counter() - started
    ours: list[float] = []
    raw: list[float] = []
    same = approx = 0
    for _ in range(reps):
        q = rng.standard_normal(DIM, dtype=np.float32)
        q /= np.linalg.norm(q)
        vec = q.tolist()
        t0 = time.perf_counter()
        hits = await store.query_vector(view_of(partition), vec, top_k=5)
        t1 = time.perf_counter()
        res = await rt.connection.run(
            col.query,
            query_embeddings=[vec],
            n_results=5,
            where={"user_id": partition},
            include=["documents", "metadatas", "distances"],
        )
        t2 = time.perf_counter()
        ours.append(t1 - t0)
        raw.append(t2 - t1)
        if [h.id for h in hits] == res["ids"][0]:
            same += 1
        else:
            dists = [h.distance for h in hits]
            if any(a > b + 1e-4 for a, b in zip(dists, res["distances"][0], strict=True)):
                raise AssertionError(f"index answer worse than Chroma's in {partition}")
            approx += 1  # Chroma's HNSW missed a closer memory; ours is exact
    return {
        "ours": Summary.of(ours),
        "raw": Summary.of(raw),
        "load": load,
        "same": same,
        "approx": approx,
    }


async def main(
    total: int, partitions: int, mode: str, reps: int, budget_mb: int, sweep: int
) -> None:
    rng = np.random.default_rng(16)
    async with bench_env() as env:
        rt = env.make_runtime("index", mode)
        rt.store.index.max_bytes = budget_mb * 1024 * 1024
        fill = await _fill(rt, total, partitions, rng)
        count = await rt.store.count_all()
        print(
            f"{mode}: {count:,} memories over {partitions:,} partitions, filled in {fill:.0f} s "
            f"({total / max(fill, 1e-9):,.0f} memories/s)"
        )
        print(
            f"{'partition':>10} | {'index p50/p95':>20} | {'Chroma p50/p95':>20} | ratio p50 | "
            "first load | same ids / approx"
        )
        for name, size in TARGETS.items():
            r = await _measure(rt, name, reps, rng)
            ratio = r["raw"].p50 / r["ours"].p50
            print(
                f"{size:>10,} | {fmt_ms(r['ours'].p50):>9} {fmt_ms(r['ours'].p95):>9}  | "
                f"{fmt_ms(r['raw'].p50):>9} {fmt_ms(r['raw'].p95):>9}  | {ratio:8.1f}x | "
                f"{fmt_ms(r['load']):>10} | {r['same']}/{reps} same, {r['approx']} Chroma-approx"
            )
        index = rt.store.index
        print(
            f"cache: {len(index)} partitions, {index.nbytes / 2**20:.1f} MiB "
            f"(budget {budget_mb} MiB, within: {index.nbytes <= (index.max_bytes or 0)})"
        )
        if sweep:
            await _sweep(rt, sweep, budget_mb)


def _rss_mib() -> float:
    """Resident memory of this process (Linux), in MiB."""
    for line in open("/proc/self/status", encoding="ascii"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def _sweep(rt: Any, partitions: int, budget_mb: int) -> None:
    """Search ``partitions`` filler partitions one after the other (more rows than the
    budget holds): the cache must evict and stay within its budget the whole time."""
    index = rt.store.index
    rss0, loads0, worst = _rss_mib(), index.loads, 0
    started = time.perf_counter()
    for i in range(partitions):
        await rt.store.query_vector(view_of(f"p{i}"), [0.0] * DIM, top_k=5)
        worst = max(worst, index.nbytes)
    took = time.perf_counter() - started
    loaded = index.loads - loads0
    print(
        f"sweep: {loaded:,} partitions loaded in {took:.0f} s, {len(index):,} kept "
        f"({loaded - len(index):,} evicted or more); cache max {worst / 2**20:.1f} MiB, "
        f"now {index.nbytes / 2**20:.1f} MiB (budget {budget_mb} MiB, within: "
        f"{worst <= index.max_bytes}); process RSS {rss0:,.0f} -> {_rss_mib():,.0f} MiB"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--total", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=1_000)
    parser.add_argument("--mode", choices=("local", "remote"), default="local")
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--budget-mb", type=int, default=256)
    parser.add_argument(
        "--sweep", type=int, default=0, help="then search this many filler partitions (budget)"
    )
    a = parser.parse_args()
    asyncio.run(main(a.total, a.partitions, a.mode, a.reps, a.budget_mb, a.sweep))
