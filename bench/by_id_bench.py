"""update / delete by id against raw Chroma, interleaved in one loop (issue 16, bench hygiene).

An earlier bench timed ``MemoryStore.update`` / ``delete`` in one loop and the
raw ``collection.update`` / ``delete`` in another, later loop, and reported
36.8 / 36.9 ms against 8.9 / 7.8 ms at 100,000 memories. Here every round does,
on the same partition and back to back: our update, the raw update (the same
metadata-only change: importance and tags), our delete, the raw delete (each of
its own throw-away memory), so both sides see the same database, the same
load and the same cache state. The partition's index is warm (it was searched),
as in a bot that answers questions, so ``PartitionIndex.updated/removed`` is
part of our cost. ``get`` by id is timed too (our write includes one).

    uv run --frozen python -m bench.by_id_bench [--total 100000] [--partitions 1000] [--mode local]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from typing import Any

import numpy as np

from tests.helpers import view_of

from .harness import bench_env
from .index_bench import DIM, TARGETS, _fill, _meta
from .stats import Summary, fmt_ms

OPS = ("get", "update", "delete")


async def _victims(rt: Any, partition: str, n: int, tag: str) -> list[str]:
    """``n`` throw-away memories of ``partition`` (added raw, not timed)."""
    col = await rt.store.collection()
    ids = [f"victim-{tag}-{partition}-{i}" for i in range(n)]
    vecs = np.full((n, DIM), 1.0 / np.sqrt(DIM), dtype=np.float32)
    metas = [_meta(partition, i) for i in range(n)]
    docs = [f"待删除 {i}" for i in ids]
    await rt.connection.run(col.add, ids=ids, embeddings=vecs, documents=docs, metadatas=metas)
    return ids


async def _measure(rt: Any, partition: str, size: int, reps: int) -> dict[str, Summary]:
    store = rt.store
    col = await store.collection()
    store.index.drop(partition)
    ours_v = await _victims(rt, partition, reps + 3, "ours")
    raw_v = await _victims(rt, partition, reps + 3, "raw")
    await store.query_vector(
        view_of(partition), [0.0] * DIM, top_k=5
    )  # warm index, as after a search
    rng = random.Random(size)
    samples: dict[str, list[float]] = {f"{w}.{o}": [] for w in ("ours", "raw") for o in OPS}

    def clock() -> float:
        return time.perf_counter()

    for k in range(reps + 3):
        mine = f"{partition}-{rng.randrange(size)}"
        theirs = f"{partition}-{rng.randrange(size)}"
        level = ("low", "medium", "high")[k % 3]
        meta = _meta(partition, k) | {"importance": level, "tags": f"基准,{level}"}
        row: dict[str, float] = {}
        order = (0, 1) if k % 2 else (1, 0)  # alternate who goes first
        for side in order:
            if side == 0:
                t0 = clock()
                await store.get(view_of(partition), mine)
                t1 = clock()
                await store.update(partition, mine, importance=level, tags=["基准", level])
                t2 = clock()
                await store.delete(partition, ours_v[k])
                t3 = clock()
                row |= {"ours.get": t1 - t0, "ours.update": t2 - t1, "ours.delete": t3 - t2}
            else:
                t0 = clock()
                await rt.connection.run(col.get, ids=[theirs], include=["documents", "metadatas"])
                t1 = clock()
                await rt.connection.run(col.update, ids=[theirs], metadatas=[meta])
                t2 = clock()
                await rt.connection.run(col.delete, ids=[raw_v[k]])
                t3 = clock()
                row |= {"raw.get": t1 - t0, "raw.update": t2 - t1, "raw.delete": t3 - t2}
        if k >= 3:  # warm-up rounds are not counted
            for key, value in row.items():
                samples[key].append(value)
    return {key: Summary.of(values) for key, values in samples.items()}


async def main(total: int, partitions: int, mode: str, reps: int) -> None:
    rng = np.random.default_rng(16)
    async with bench_env() as env:
        rt = env.make_runtime("by_id", mode)
        fill = await _fill(rt, total, partitions, rng)
        count = await rt.store.count_all()
        print(f"{mode}: {count:,} memories over {partitions:,} partitions, filled in {fill:.0f} s")
        print(
            f"{'partition':>10} | {'op':>6} | {'MemoryStore p50/p95':>20} | "
            f"{'raw Chroma p50/p95':>20} | ratio p50"
        )
        for name, size in TARGETS.items():
            r = await _measure(rt, name, size, reps)
            for op in OPS:
                ours, raw = r[f"ours.{op}"], r[f"raw.{op}"]
                print(
                    f"{size:>10,} | {op:>6} | {fmt_ms(ours.p50):>9} {fmt_ms(ours.p95):>9}  | "
                    f"{fmt_ms(raw.p50):>9} {fmt_ms(raw.p95):>9}  | {ours.p50 / raw.p50:8.2f}x"
                )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--total", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=1_000)
    parser.add_argument("--mode", choices=("local", "remote"), default="local")
    parser.add_argument("--reps", type=int, default=100)
    a = parser.parse_args()
    asyncio.run(main(a.total, a.partitions, a.mode, a.reps))
