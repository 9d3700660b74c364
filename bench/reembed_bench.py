"""Items 4, 6 and 7: re-embedding, the startup check and event-loop lag.

Uses the public functions of ``amrita_plugin_memory.embedding``
(``remap``, ``run_startup_check``, ``reset_fingerprint``). The remap is
instrumented from the outside — the runtime's embedder and Chroma connection
are wrapped for the duration — to show where its time goes.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import aiohttp
import numpy as np

from .common import ModeContext, caller_of, timed_sync
from .data import memory_metadata
from .harness import EMBED_MODEL
from .stats import GcProbe, LoopLagProbe, PeakRss, Summary, fmt_ms, verdict

REEMBED_RATIO_TARGET = 0.8
PHASE_SHORT = {
    "Chroma add": "add",
    "read source pages": "read pages",
    "embedding (our client, HTTP)": "embed",
    "JSON backup": "backup",
    "verify pass": "verify",
    "other Chroma calls": "other Chroma",
    "read pages by id": "read pages",
    "read id list": "id list",
    "embedding": "embed",
}
REEMBED_RSS_TARGET_MB = 200.0
STARTUP_TARGET = 0.3  # s
LAG_TARGET = 0.050  # s


def embedding_module() -> Any | None:
    """``amrita_plugin_memory.embedding`` if it is there (it is written in parallel)."""
    try:
        return importlib.import_module("amrita_plugin_memory.embedding")
    except ImportError:
        return None


# ---------------------------------------------------------------------------
# Item 6: startup check
# ---------------------------------------------------------------------------


async def bench_startup(ctx: ModeContext, reps: int) -> None:
    emb = embedding_module()
    if emb is None or not hasattr(emb, "run_startup_check"):
        ctx.row("6", "startup check", value="not available", verdict="SKIP")
        return
    from amrita_plugin_memory.storage.keys import KEY_FORMAT_META, current_key_format

    rt = ctx.rt
    await emb.reset_fingerprint(rt.maintenance)
    # The memories were written with the current keys: record that, as a
    # completed key migration would have.
    await rt.store.set_meta({KEY_FORMAT_META: current_key_format()})
    times: list[float] = []
    actions: set[str] = set()
    for _ in range(reps + 1):
        started = time.perf_counter()
        result = emb.run_startup_check(rt.maintenance, interactive=False)
        times.append(time.perf_counter() - started)
        actions.add(result.action)
    if actions != {"match"}:
        raise RuntimeError(f"startup check did not match: {actions}")
    s = Summary.of(times[1:])
    count = await rt.store.count_all()
    ctx.row(
        "6",
        f"run_startup_check, fingerprint + keys current, {count:,} memories",
        p50=fmt_ms(s.p50),
        p95=fmt_ms(s.p95),
        value=f"max {fmt_ms(s.max)}; verdict on p95",
        target="≤ 300 ms",
        verdict=verdict(s.p95 <= STARTUP_TARGET),
    )


# ---------------------------------------------------------------------------
# Item 7: concurrent reads
# ---------------------------------------------------------------------------


async def bench_concurrent_reads(ctx: ModeContext) -> None:
    ds, rt = ctx.ds, ctx.rt
    n = ctx.scale.concurrent_reads
    # 50 different users asking at once; the biggest partition among them.
    partitions = [ds.big, ds.mid, ds.small, *ds.keys[3:]][:n]
    partitions += [ds.keys[i % len(ds.keys)] for i in range(n - len(partitions))]
    await rt.tools.read_memory(caller_of(ds, ds.big), {"query": "预热", "scope": "user"})
    probe = LoopLagProbe()
    gc_probe = GcProbe()
    gc_probe.start()
    probe.start()
    await asyncio.sleep(0.05)
    started = time.perf_counter()
    results = await asyncio.gather(
        *(
            rt.tools.read_memory(
                caller_of(ds, p), {"query": ds.docs[ds.indices(p)[0]], "top_k": 5, "scope": "user"}
            )
            for p in partitions
        )
    )
    wall = time.perf_counter() - started
    lag = await probe.stop()
    gc_longest = gc_probe.stop()
    ctx.fact("reads.lag_max", lag.max)
    failed = [r for r in results if not r.get("ok")]
    if failed:
        raise RuntimeError(f"concurrent read_memory failed: {failed[0]}")
    ctx.row(
        "7",
        f"loop lag, {n} concurrent read_memory (10 ms ticker)",
        p50=fmt_ms(lag.p50),
        p95=fmt_ms(lag.p95),
        value=(
            f"max {fmt_ms(lag.max)}; {n} reads in {wall * 1000:.0f} ms; "
            f"longest GC pass {fmt_ms(gc_longest)}"
        ),
        target="max ≤ 50 ms",
        verdict=verdict(lag.max <= LAG_TARGET),
    )


# ---------------------------------------------------------------------------
# Item 4 (+ 7 during the reindex): re-embedding
# ---------------------------------------------------------------------------


async def embedding_server_throughput(url: str, docs: list[str], batch: int) -> float:
    """Items/s of the embedding server alone: sequential HTTP batches, JSON parsed."""
    async with aiohttp.ClientSession() as session:

        async def post(texts: list[str]) -> None:
            async with session.post(
                url + "/api/embed", json={"model": EMBED_MODEL, "input": texts}
            ) as resp:
                body = await resp.json()
                if resp.status != 200 or len(body["embeddings"]) != len(texts):
                    raise RuntimeError(f"embedding server answered {resp.status}")

        await post(docs[:batch])
        started = time.perf_counter()
        for s in range(0, len(docs), batch):
            await post(docs[s : s + batch])
        return len(docs) / (time.perf_counter() - started)


class PhaseClock:
    """Accumulates where a remap spends its time, by wrapping its collaborators.

    The runtime's embedder and Chroma connection are wrapped per instance; the
    remap's whole-pass helpers (``create_backup``, the verification pass
    ``_same_contents``) are wrapped as module attributes when they exist, and
    the calls made inside them count for them, not for the build.
    """

    PASSES: ClassVar[dict[str, str]] = {
        "create_backup": "JSON backup",
        "_same_contents": "verify pass",
    }

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}
        self.longest: tuple[float, str] = (0.0, "")
        self.timeline: list[tuple[float, float, str]] = []  # (start, end, what)
        self._in_pass = False

    def add(self, phase: str, seconds: float) -> None:
        self.totals[phase] = self.totals.get(phase, 0.0) + seconds

    @contextlib.contextmanager
    def installed(self, rt: Any, emb: Any) -> Iterator[None]:
        orig_embed = rt.embedder.embed
        orig_run = rt.connection.run
        originals = {name: getattr(emb, name) for name in self.PASSES if hasattr(emb, name)}

        async def embed(texts: Any) -> Any:
            started = time.perf_counter()
            try:
                return await orig_embed(texts)
            finally:
                self.timeline.append((started, time.perf_counter(), "embedding call"))
                if not self._in_pass:
                    self.add("embedding (our client, HTTP)", time.perf_counter() - started)

        async def run(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            target = fn.func if isinstance(fn, functools.partial) else fn
            name = getattr(target, "__name__", "?")
            started = time.perf_counter()
            try:
                return await orig_run(fn, *args, **kwargs)
            finally:
                took = time.perf_counter() - started
                self.timeline.append((started, started + took, f"Chroma {name}"))
                if took > self.longest[0]:
                    self.longest = (took, name)
                if not self._in_pass:
                    phase = {"get": "read source pages", "add": "Chroma add"}.get(
                        name, "other Chroma calls"
                    )
                    self.add(phase, took)

        def wrap(name: str, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
            async def timed_pass(*args: Any, **kwargs: Any) -> Any:
                self._in_pass = True
                started = time.perf_counter()
                try:
                    return await fn(*args, **kwargs)
                finally:
                    self._in_pass = False
                    self.timeline.append((started, time.perf_counter(), name))
                    self.add(self.PASSES[name], time.perf_counter() - started)

            return timed_pass

        # Instance attributes shadow the methods; deleting them restores the class's.
        setattr(rt.embedder, "embed", embed)  # noqa: B010
        setattr(rt.connection, "run", run)  # noqa: B010
        for name, fn in originals.items():
            setattr(emb, name, wrap(name, fn))
        try:
            yield
        finally:
            delattr(rt.embedder, "embed")
            delattr(rt.connection, "run")
            for name, fn in originals.items():
                setattr(emb, name, fn)


@dataclass
class Observed:
    """A call run under the lag, GC and RSS probes."""

    result: Any
    wall: float
    lag: Summary
    worst: tuple[float, float]  # (lag, end time) of the worst tick
    gc: GcProbe
    rss_mb: float


async def _observed(call: Callable[[], Awaitable[Any]]) -> Observed:
    probe = LoopLagProbe()
    gc_probe = GcProbe()
    rss = PeakRss()
    rss.start()
    gc_probe.start()
    probe.start()
    started = time.perf_counter()
    result = await call()
    wall = time.perf_counter() - started
    lag = await probe.stop()
    gc_probe.stop()
    return Observed(result, wall, lag, probe.worst, gc_probe, rss.stop())


def _blame(obs: Observed, clock: PhaseClock, interval: float = 0.010) -> str:
    """What ran while the event loop was stuck for its worst tick (the longest overlap)."""
    lag, end = obs.worst
    start = end - lag - interval
    overlapping = [(e - s, what) for s, e, what in clock.timeline if s < end and e > start]
    parts = []
    if overlapping:
        took, what = max(overlapping)
        parts.append(f"{what} ({fmt_ms(took)})")
    gc_hits = [d for _, d, e in obs.gc.pauses if e > start and e - d < end]
    if gc_hits:
        parts.append(f"a GC pass ({fmt_ms(max(gc_hits))})")
    return " + ".join(parts) if parts else "no wrapped call (Python on the loop)"


def _paging_profile(ctx: ModeContext) -> dict[str, Summary]:
    """What one source page costs: ``get(limit, offset)`` at growing offsets vs ``get(ids)``."""
    col, batch, ds = ctx.col, ctx.scale.batch, ctx.ds
    total = len(ds.ids)
    include: Any = ["documents", "metadatas"]
    out: dict[str, Summary] = {}
    for name, offset in (
        ("offset 0", 0),
        ("offset n/2", total // 2),
        ("offset n-1", total - batch),
    ):
        out[name] = Summary.of(
            [
                timed_sync(lambda o=offset: col.get(limit=batch, offset=o, include=include))
                for _ in range(5)
            ]
        )
    out["by ids"] = Summary.of(
        [
            timed_sync(lambda s=s: col.get(ids=ds.ids[s : s + batch], include=include))
            for s in range(0, total - batch, max(batch, (total - batch) // 5))
        ]
    )
    out["id list"] = Summary.of([timed_sync(lambda: col.get(include=[])) for _ in range(2)])
    return out


def _gil_probe(ctx: ModeContext) -> dict[str, tuple[float, float]]:
    """Main-thread lag while ONE Chroma call runs in a worker thread: (call s, max lag s).

    ``asyncio.to_thread`` only helps if the call releases the GIL; this shows
    which calls do.
    """
    ds, col, batch = ctx.ds, ctx.col, ctx.scale.batch
    idx = ds.indices(ds.mid)
    vec = ds.vectors[idx[0]]
    ids = [f"gil-{ctx.mode}-{i}" for i in range(batch)]
    meta = memory_metadata(ds.mid, "low", "2025-01-01T00:00:00+00:00", "[]")
    calls: dict[str, Callable[[], Any]] = {
        f"add {batch}": lambda: col.add(
            ids=ids,
            documents=["gil"] * batch,
            embeddings=np.repeat(vec[None, :], batch, axis=0),
            metadatas=[meta] * batch,  # type: ignore[arg-type]
        ),
        "query where": lambda: col.query(
            query_embeddings=[vec.tolist()], n_results=5, where={"user_id": ds.mid}
        ),
        "update 1": lambda: col.update(ids=[ids[0]], metadatas=[meta]),
        f"delete {batch}": lambda: col.delete(ids=ids),
    }
    out: dict[str, tuple[float, float]] = {}
    for name, call in calls.items():
        done = threading.Event()
        took = [0.0]

        def work(
            c: Callable[[], Any] = call, t: list[float] = took, d: threading.Event = done
        ) -> None:
            started = time.perf_counter()
            try:
                c()
            finally:
                t[0] = time.perf_counter() - started
                d.set()

        worker = threading.Thread(target=work)
        lags: list[float] = []
        last = time.perf_counter()
        worker.start()
        while not done.is_set():
            time.sleep(0.002)
            now = time.perf_counter()
            lags.append(now - last - 0.002)
            last = now
        worker.join()
        out[name] = (took[0], max(lags, default=0.0))
    return out


def _add_batch(emb: Any, mode: str, batch: int) -> int:
    """Items per Chroma add in remap() (gathered from several embedding batches)."""
    name = "ADD_BATCH_REMOTE" if mode == "remote" else "ADD_BATCH_LOCAL"
    return max(batch, int(getattr(emb, name, batch)))


async def bench_reembed(ctx: ModeContext, env_url: str) -> None:
    emb = embedding_module()
    if emb is None or not hasattr(emb, "remap"):
        ctx.row("4", "re-embedding", value="not available", verdict="SKIP")
        return
    ds, rt, scale = ctx.ds, ctx.rt, ctx.scale
    total = await rt.store.count_all()
    probe_docs = ds.docs[: scale.embed_probe]
    server_rate = await embedding_server_throughput(env_url, probe_docs, scale.batch)
    chroma_rate = ctx.fill_items_per_s
    bound = min(server_rate, chroma_rate)
    bound_name = "embedding server" if server_rate <= chroma_rate else "Chroma add"
    ctx.row(
        "4",
        f"embedding server alone, HTTP batch {scale.batch}",
        value=f"{server_rate:,.0f} items/s",
        target="baseline",
    )
    paging = _paging_profile(ctx)
    ctx.row(
        "4",
        f"raw source page of {scale.batch}: get(limit, offset) vs get(ids)",
        p50=fmt_ms(paging["offset n/2"].p50),
        value=(
            f"offset 0 {fmt_ms(paging['offset 0'].p50)}, n/2 {fmt_ms(paging['offset n/2'].p50)}, "
            f"n-1 {fmt_ms(paging['offset n-1'].p50)}; by ids {fmt_ms(paging['by ids'].p50)}; "
            f"all {total:,} ids once {fmt_ms(paging['id list'].p50)}"
        ),
        target="info",
    )
    for name, summary in paging.items():
        ctx.fact(f"page.{name}", summary.p50)
    for name, (took, max_lag) in _gil_probe(ctx).items():
        ctx.fact(f"gil.{name}.call", took)
        ctx.fact(f"gil.{name}.lag", max_lag)
        ctx.row(
            "7",
            f"main-thread lag while raw {name} runs in a worker thread",
            p50="",
            value=f"max lag {fmt_ms(max_lag)} for a {fmt_ms(took)} call",
            target="info",
        )
    clock = PhaseClock()
    server = getattr(rt.connection, "server", None)
    child = PeakRss(server.pid) if server is not None and server.pid else None
    if child is not None:
        child.start()  # served mode: Chroma's memory is in the child ``chroma run``
    with clock.installed(rt, emb):
        obs = await _observed(lambda: emb.remap(rt.maintenance))
    child_mb = child.stop() if child is not None else None
    report, wall, lag, rss_mb = obs.result, obs.wall, obs.lag, obs.rss_mb
    if report.total != total or await rt.store.count_all() != total:
        raise RuntimeError(f"remap lost items: {report.total} / {total}")
    rate = total / wall
    r = rate / bound
    ctx.fact("reembed.ratio", r)
    ctx.fact("reembed.rate", rate)
    ctx.fact("reembed.bound", bound)
    ctx.fact("reembed.wall", wall)
    ctx.fact("reembed.rss_mb", rss_mb)
    ctx.fact("fill.rss_mb", ctx.fill_rss_mb)
    for phase, seconds in clock.totals.items():
        ctx.fact(f"reembed.phase.{phase}", seconds)
    ctx.row(
        "4",
        f"remap() of {total:,} memories, items/s",
        value=(
            f"{r:.2f}× of {bound_name} ({rate:,.0f} vs {bound:,.0f} items/s; {wall:.1f} s; "
            f"embeds of {scale.batch}, adds of {_add_batch(emb, ctx.mode, scale.batch)})"
        ),
        target=f"≥ {REEMBED_RATIO_TARGET}×",
        verdict=verdict(r >= REEMBED_RATIO_TARGET),
    )
    phases = sorted(clock.totals.items(), key=lambda kv: -kv[1])
    accounted = sum(clock.totals.values())
    phases.append(("rest", max(0.0, wall - accounted)))
    ctx.row(
        "4",
        "remap() time by phase",
        value=", ".join(
            f"{PHASE_SHORT.get(name, name)} {seconds:.0f} s" for name, seconds in phases
        ),
        target="info",
    )
    ctx.row(
        "4",
        "remap() peak RSS growth (this process)",
        value=f"+{rss_mb:.0f} MB (raw fill of the same data: +{ctx.fill_rss_mb:.0f} MB)",
        target=f"≤ {REEMBED_RSS_TARGET_MB:.0f} MB",
        verdict=verdict(rss_mb <= REEMBED_RSS_TARGET_MB),
    )
    if child_mb is not None:
        ctx.fact("reembed.child_rss_mb", child_mb)
        ctx.row(
            "4",
            "remap() peak RSS growth (child chroma run)",
            value=f"+{child_mb:.0f} MB"
            + ("" if child is not None and child.exact else " (approx.)"),
            target="info",
        )
    longest, longest_name = clock.longest
    ctx.fact("reembed.lag_max", lag.max)
    ctx.fact("reembed.longest_call", longest)
    ctx.fact(f"reembed.longest_is.{longest_name}", 1.0)
    blame = _blame(obs, clock)
    ctx.fact(f"reembed.blame.{blame}", 1.0)
    ctx.row(
        "7",
        "loop lag during remap() (10 ms ticker)",
        p50=fmt_ms(lag.p50),
        p95=fmt_ms(lag.p95),
        value=(
            f"max {fmt_ms(lag.max)} ({lag.n:,} ticks) during {blame}; "
            f"longest GC pass {fmt_ms(obs.gc.longest)}"
        ),
        target="max ≤ 50 ms",
        verdict=verdict(lag.max <= LAG_TARGET),
    )
