"""The memory console's list endpoint at 100,000 memories (issue 14: <= 50 ms p95 for any page).

    uv run --frozen python -m bench.console_bench             # 100,000 memories (~4 min)
    uv run --frozen python -m bench.console_bench --total 20000   # smoke test

The collection holds ``--total`` memories, all but 1,000 of them in ONE
partition (the worst case: the page must be cut from the largest id list)
and 1,000 spread over ten small partitions. Requests go through the real
FastAPI routes of the admin API (:func:`~amrita_plugin_memory.adapters.console_http.build_router`)
in-process over ASGI, so the figures include routing, validation and JSON;
they exclude the WebUI's login middleware and the network. Pages are drawn
uniformly over the whole partition (first, last and everything between) for
page sizes 20, 50 and 100. Printed besides: the first request of a partition
(it reads the partition's id list once), a semantic search, and the partition
scan behind the partition list (cached by the console).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from typing import Any

import numpy as np

from .harness import DIM, bench_env
from .stats import Summary, fmt_ms

TARGET_MS = 50.0
BIG = "QQPlatform_Private_100000"
SMALL = [f"QQPlatform_Private_{200000 + i}" for i in range(10)]


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.console_bench")
    parser.add_argument("--total", type=int, default=100_000, help="memories in the collection")
    parser.add_argument("--requests", type=int, default=300, help="timed pages per page size")
    parser.add_argument("--keep", action="store_true", help="keep the temporary work directory")
    return parser.parse_args(argv)


def _progress(message: str, started: float) -> None:
    print(f"[console bench {time.perf_counter() - started:6.1f} s] {message}", file=sys.stderr)


async def _fill(rt: Any, total: int, started: float) -> None:
    """Raw ChromaDB adds, oldest first (insertion order is the console's "newest first")."""
    col = await rt.store.collection()
    rng = np.random.default_rng(14)
    small = min(1_000, total // 10)
    owners = [BIG] * (total - small) + [SMALL[i % len(SMALL)] for i in range(small)]
    random.Random(14).shuffle(owners)
    batch = 1_000
    for start in range(0, total, batch):
        stop = min(start + batch, total)
        metas = [
            {
                "user_id": owners[n],
                "scope": "user",
                "tags": '["基准"]',
                "importance": ("low", "medium", "high")[n % 3],
                "created_at": f"2025-01-01T00:00:00+00:00#{n:07d}",
                "updated_at": "2025-01-01T00:00:00+00:00",
                "origin": "private",
                "from_group": False,
            }
            for n in range(start, stop)
        ]
        await rt.connection.run(
            lambda s=start, e=stop, m=metas: col.add(
                ids=[f"m{n:07d}" for n in range(s, e)],
                documents=[f"基准记忆 #{n}：用户提到第 {n % 977} 件事" for n in range(s, e)],
                embeddings=rng.random((e - s, DIM), dtype=np.float32),
                metadatas=m,
            )
        )
        if stop % 20_000 == 0 or stop == total:
            _progress(f"filled {stop:,}/{total:,}", started)
    rt.store.invalidate()


async def run(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    started = time.perf_counter()
    async with bench_env(keep=args.keep) as env:
        import httpx
        from fastapi import FastAPI, Request

        from amrita_plugin_memory.adapters.console_http import build_router
        from amrita_plugin_memory.console.service import ConsoleService

        rt = env.make_runtime("console", "local")
        _progress(f"filling {args.total:,} memories", started)
        await _fill(rt, args.total, started)
        service = ConsoleService(rt)

        async def actor(_: Request) -> str:
            return "bench"

        app = FastAPI()
        app.include_router(build_router(service, actor), prefix="/api/memory")
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:

            async def get(path: str, **params: Any) -> tuple[float, dict[str, Any]]:
                t0 = time.perf_counter()
                resp = await client.get(path, params=params)
                elapsed = time.perf_counter() - t0
                body = resp.json()
                assert body["success"], body
                return elapsed, body["data"]

            big_size = args.total - min(1_000, args.total // 10)
            cold, first = await get("/api/memory/memories", partition=BIG, limit=20)
            assert first["total"] == big_size, first["total"]
            rows: list[tuple[str, Summary, str]] = []
            rng = random.Random(7)
            worst = 0.0
            for limit in (20, 50, 100):
                pages = (big_size + limit - 1) // limit
                offsets = [0, (pages - 1) * limit] + [
                    rng.randrange(pages) * limit for _ in range(args.requests - 2)
                ]
                times = []
                for offset in offsets:
                    elapsed, page = await get(
                        "/api/memory/memories", partition=BIG, offset=offset, limit=limit
                    )
                    assert page["memories"], offset
                    times.append(elapsed)
                summary = Summary.of(times)
                worst = max(worst, summary.p95)
                rows.append(
                    (f"page of {limit} ({pages:,} pages, {len(offsets)} requests)", summary, "list")
                )
            small_times = [
                (await get("/api/memory/memories", partition=p, limit=20))[0] for p in SMALL * 10
            ]
            rows.append(
                ("page of 20, small partitions (100 each)", Summary.of(small_times), "list")
            )
            search = [
                (await get("/api/memory/memories", partition=BIG, q=f"第 {i} 件事", limit=20))[0]
                for i in range(30)
            ]
            rows.append(("semantic search, top 20", Summary.of(search), "search"))
            scan, parts = await get("/api/memory/partitions", fresh=1)
            cached, _ = await get("/api/memory/partitions")

        print()
        print(
            f"memory console list endpoint — {args.total:,} memories, partition of {big_size:,} "
            f"(+ {len(SMALL)} small ones), {DIM}-dim, embedded ChromaDB, in-process ASGI"
        )
        print(f"  first request of the big partition (reads its id list once): {fmt_ms(cold)}")
        for what, summary, _ in rows:
            print(
                f"  {what:<48} p50 {fmt_ms(summary.p50):>9}  p95 {fmt_ms(summary.p95):>9}"
                f"  max {fmt_ms(summary.max):>9}"
            )
        print(
            f"  partition list: scan of {parts['memories']:,} memories {fmt_ms(scan)}, "
            f"then cached {fmt_ms(cached)}"
        )
        verdict = "PASS" if worst * 1000 <= TARGET_MS else "FAIL"
        print(
            f"  target: any page <= {TARGET_MS:.0f} ms p95 -> worst p95 {fmt_ms(worst)}: {verdict}"
        )
        _progress("done", started)
        return 0 if verdict == "PASS" else 1


def main() -> None:
    sys.exit(asyncio.run(run()))


if __name__ == "__main__":
    main()
