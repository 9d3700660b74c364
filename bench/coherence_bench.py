"""Two processes on one store: the cost of coherence per read and the staleness (issue 30).

Two real remote-mode :class:`MemoryRuntime` objects (each its own Chroma HTTP
client, caches, change feed and leases: two bot processes) share one ``chroma
run`` and one SQLite database. One partition of ``--size`` memories (384-d
random vectors) is cached by both.

* **read**: ``MemoryStore.query_vector`` on the cached partition, the change
  feed on (``fresh``: a clock comparison, or a poll when the last one is older
  than ``MAX_LAG``) against the same store with the feed off, alternately;
  and one synchronous poll (what a read pays when the poller stalled).
* **staleness**: A writes a memory; the time until B's background poller has
  invalidated the partition (B's next read sees the write).
* **write**: ``MemoryStore.add`` (vector given) with the write section's
  lease, poll and feed row, against the same without them.

    uv run --frozen python -m bench.coherence_bench [--size 1000] [--reps 300] [--writes 60]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import numpy as np

from tests.helpers import new_memory, view_of

from .harness import bench_env
from .stats import Summary, fmt_ms

DIM = 384
P = "QQPlatform_Private_40001"


def _unit(rng: np.random.Generator) -> list[float]:
    v = rng.standard_normal(DIM, dtype=np.float32)
    return (v / np.linalg.norm(v)).tolist()


async def _fill(rt: Any, size: int, rng: np.random.Generator) -> None:
    col = await rt.store.collection()
    for start in range(0, size, 500):
        ids = [f"m{k}" for k in range(start, min(size, start + 500))]
        vecs = np.asarray([_unit(rng) for _ in ids], dtype=np.float32)
        metas: Any = [
            {
                "user_id": P,
                "scope": "user",
                "tags": "",
                "importance": "medium",
                "created_at": "2026-01-01T00:00:00+00:00",
                "updated_at": "2026-01-01T00:00:00+00:00",
                "origin": "private",
                "from_group": False,
            }
            for _ in ids
        ]
        docs = [f"记忆 {i}" for i in ids]
        await rt.connection.run(col.add, ids=ids, embeddings=vecs, documents=docs, metadatas=metas)


def _line(name: str, s: Summary) -> str:
    return f"{name:<44} p50 {fmt_ms(s.p50):>9}  p95 {fmt_ms(s.p95):>9}  max {fmt_ms(s.max):>9}"


async def run(size: int, reps: int, writes: int) -> None:
    rng = np.random.default_rng(7)
    async with bench_env() as env:
        from amrita_plugin_memory.storage.shared.coherence import Coherence

        a = env.make_runtime("a", "remote")
        b = env.make_runtime("b", "remote")
        await _fill(a, size, rng)
        on = b.store.coherence
        off = Coherence(b.store.name)
        await b.store.query_vector(view_of(P), _unit(rng), top_k=5)  # loads the partition
        with_feed: list[float] = []
        without: list[float] = []
        for _ in range(reps):
            q = _unit(rng)
            for coherence, out in ((on, with_feed), (off, without)):
                b.store.coherence = coherence
                began = time.perf_counter()
                await b.store.query_vector(view_of(P), q, top_k=5)
                out.append(time.perf_counter() - began)
        b.store.coherence = on
        assert b.store.index.loads == 1, "the partition was reloaded during the read loop"
        feed = on.feed
        assert feed is not None
        polls: list[float] = []
        for _ in range(reps):
            began = time.perf_counter()
            await feed.poll()
            polls.append(time.perf_counter() - began)

        seen = asyncio.Event()
        feed.follow(lambda partition: seen.set(), seen.set)
        stale: list[float] = []
        write_on: list[float] = []
        for _ in range(writes):
            await b.store.query_vector(view_of(P), _unit(rng), top_k=1)  # B has it cached again
            seen.clear()
            began = time.perf_counter()
            await a.store.add(new_memory(P, "user", "新写入"), vector=_unit(rng))
            done = time.perf_counter()
            write_on.append(done - began)
            await asyncio.wait_for(seen.wait(), 10)
            stale.append(time.perf_counter() - done)
        a_on = a.store.coherence
        a.store.coherence = Coherence(a.store.name)
        write_off: list[float] = []
        for _ in range(writes):
            began = time.perf_counter()
            await a.store.add(new_memory(P, "user", "新写入"), vector=_unit(rng))
            write_off.append(time.perf_counter() - began)
        a.store.coherence = a_on

        print(f"partition of {size:,} memories, remote mode, SQLite, {reps} reads, {writes} writes")
        print(_line("read, feed on (query_vector, cached)", Summary.of(with_feed)))
        print(_line("read, feed off", Summary.of(without)))
        print(_line("one synchronous poll", Summary.of(polls)))
        print(_line("staleness (A's add returned -> B invalid)", Summary.of(stale)))
        print(_line("write, section with lease + poll + row", Summary.of(write_on)))
        print(_line("write, without", Summary.of(write_off)))


def main() -> None:
    parser = argparse.ArgumentParser(description="Coherence of several processes on one store")
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=300)
    parser.add_argument("--writes", type=int, default=60)
    args = parser.parse_args()
    asyncio.run(run(args.size, args.reps, args.writes))


if __name__ == "__main__":
    main()
