"""What a period in a question costs recall: ``MemoryStore.search`` at 1,000 memories.

Fills one partition of a real :class:`MemoryRuntime` (local Chroma) with 1,000 memories
said on different days over a year (random unit vectors: the cost of the ranking, not
of a model), then times the search the same query vector gets with a question naming
no period, one naming a week ("上周…"), a month ("十月份…") and an event-time
memory mix, with the partition index warm (a chat turn's case), alternately in one loop.
The issue's bound: a period adds at most 15 ms per turn at 1,000 memories.

    uv run --frozen python -m bench.period_latency [--memories 1000] [--reps 200]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from tests.helpers import view_of

from .harness import bench_env
from .stats import Summary, fmt_ms

DIM = 384
PARTITION = "QQPlatform_Private_70001"
QUERIES = {
    "no period": "我说过想去哪里旅行",
    "上周": "上周我说想去哪里旅行来着",
    "十月份": "十月份我提过去哪里旅行吗",
    "last week": "Where did I say I wanted to travel last week?",
}


async def _fill(rt: Any, n: int, rng: np.random.Generator) -> None:
    col = await rt.store.collection()
    start = datetime(2025, 12, 1, tzinfo=UTC)
    ids, metas = [f"m{i}" for i in range(n)], []
    for i in range(n):
        said = (start + timedelta(hours=int(rng.integers(0, 365 * 24)))).isoformat()
        meta: dict[str, Any] = {
            "user_id": PARTITION,
            "scope": "user",
            "tags": "[]",
            "importance": "medium",
            "created_at": said,
            "updated_at": said,
            "origin": "private",
            "from_group": False,
        }
        if i % 5 == 0:  # a fifth carry an event time
            meta["event_time"] = said[:10] if i % 2 else said[:7]
        metas.append(meta)
    vecs = rng.standard_normal((n, DIM), dtype=np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    docs = [f"用户说过的第{i}件事" for i in range(n)]
    await rt.connection.run(col.add, ids=ids, embeddings=vecs, documents=docs, metadatas=metas)


async def main(memories: int, reps: int) -> None:
    rng = np.random.default_rng(45)
    async with bench_env() as env:
        rt = env.make_runtime("period", "local")
        rt.store.clock = lambda: "2026-12-04T00:00:00+00:00"
        await _fill(rt, memories, rng)
        view = view_of(PARTITION)
        times: dict[str, list[float]] = {name: [] for name in QUERIES}
        for _ in range(reps):
            q = rng.standard_normal(DIM, dtype=np.float32)
            vec = (q / np.linalg.norm(q)).tolist()
            for name, text in QUERIES.items():
                t0 = time.perf_counter()
                await rt.store.search(view, text, vec, top_k=5)
                times[name].append(time.perf_counter() - t0)
        base = Summary.of(times["no period"])
        print(f"search at {memories:,} memories, {reps} queries each (index warm)")
        for name, values in times.items():
            s = Summary.of(values)
            added = s.p50 - base.p50
            print(
                f"  {name:10s} p50 {fmt_ms(s.p50)}  p95 {fmt_ms(s.p95)}  added p50 {fmt_ms(added)}"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--memories", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=200)
    args = parser.parse_args()
    asyncio.run(main(args.memories, args.reps))
