"""Items 1, 2, 3 and 8: reads, by-id operations and writes against raw ChromaDB.

Every comparison runs side by side on the same collection in the same
process, alternating our call and the raw call so that a change of machine
load hits both equally.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from tests.helpers import view_of

from .common import (
    ModeContext,
    caller_of,
    precomputed_embedder,
    timed,
    timed_sync,
)
from .data import Dataset, memory_metadata
from .stats import PeakRss, Summary, fmt_ms, verdict

if TYPE_CHECKING:
    from amrita_plugin_memory.storage.memory_store import MemoryStore
    from amrita_plugin_memory.storage.scope import Scope
    from amrita_plugin_memory.tools.memory_tools import MemoryTools

INCLUDE: Any = ["documents", "metadatas", "distances"]
READ_TARGET = 1.25
BY_ID_TARGET = 1.5
WRITE_TARGET = 0.8
BY_ID_OPS = ("get", "update", "delete")


def numpy_top_k(vectors: np.ndarray, sq_norms: np.ndarray, query: np.ndarray, k: int) -> np.ndarray:
    """Exact squared-L2 top ``k`` of one partition (what Chroma's ``l2`` space returns)."""
    dist = sq_norms - 2.0 * (vectors @ query) + float(query @ query)
    k = min(k, len(dist))
    top = np.argpartition(dist, k - 1)[:k]
    return top[np.argsort(dist[top])]


def _numpy_scan(ds: Dataset, partition: str, reps: int, rng: random.Random) -> Summary:
    idx = ds.indices(partition)
    matrix = np.ascontiguousarray(ds.vectors[idx])
    sq_norms = np.einsum("ij,ij->i", matrix, matrix)
    times = []
    for _ in range(reps + 3):
        query = ds.vectors[idx[rng.randrange(len(idx))]]
        started = time.perf_counter()
        numpy_top_k(matrix, sq_norms, query, 5)
        times.append(time.perf_counter() - started)
    return Summary.of(times[3:])


def _raw_query(ctx: ModeContext, partition: str | None, vector: list[float]) -> None:
    ctx.col.query(
        query_embeddings=[vector],  # type: ignore[arg-type]
        n_results=5,
        where={"user_id": partition} if partition is not None else None,
        include=INCLUDE,
    )


def _raw_query_summary(
    ctx: ModeContext, partition: str | None, probe_partition: str, reps: int, rng: random.Random
) -> Summary:
    idx = ctx.ds.indices(probe_partition)
    times = []
    for _ in range(reps + 3):
        vector = ctx.ds.vectors[idx[rng.randrange(len(idx))]].tolist()
        times.append(timed_sync(lambda v=vector: _raw_query(ctx, partition, v)))
    return Summary.of(times[3:])


# ---------------------------------------------------------------------------
# Filling the collection (raw ChromaDB adds: also item 4's add baseline)
# ---------------------------------------------------------------------------


async def fill(ctx: ModeContext) -> None:
    """Add every memory with raw ``collection.add`` in batches of REEMBED_BATCH_SIZE.

    Between the stages the cost of a filtered query on the mid partition is
    measured, to show how it grows with the whole collection (item 8).
    """
    ds, col, scale = ctx.ds, ctx.col, ctx.scale
    rng = random.Random(11)
    add_seconds = 0.0
    rss = PeakRss()
    rss.start()
    start = 0
    growth: list[tuple[int, Summary, Summary, Summary]] = []
    for stage_end in ds.stages:
        for s, e in ds.batches(start, stage_end, scale.batch):
            add_seconds += timed_sync(
                lambda s=s, e=e: col.add(
                    ids=ds.ids[s:e],
                    documents=ds.docs[s:e],
                    embeddings=ds.vectors[s:e],
                    metadatas=ds.metas[s:e],  # type: ignore[arg-type]
                )
            )
        start = stage_end
        filtered = _raw_query_summary(ctx, ds.mid, ds.mid, scale.reps, rng)
        unfiltered = _raw_query_summary(ctx, None, ds.mid, scale.reps, rng)
        scan = _numpy_scan(ds, ds.mid, scale.reps, rng)
        growth.append((stage_end, filtered, unfiltered, scan))
    ctx.fill_rss_mb = rss.stop()
    ctx.fill_items_per_s = len(ds.ids) / add_seconds
    ctx.row(
        "4",
        f"raw ChromaDB add, batch {scale.batch}, fill to {len(ds.ids):,}",
        value=f"{ctx.fill_items_per_s:,.0f} items/s; RSS +{ctx.fill_rss_mb:.0f} MB",
        target="baseline",
    )
    mid = ds.size(ds.mid)
    for total, filtered, unfiltered, scan in growth:
        ctx.fact(f"growth.{total}.filtered", filtered.p50)
        ctx.fact(f"growth.{total}.unfiltered", unfiltered.p50)
        ctx.fact(f"growth.{total}.scan", scan.p50)
        ctx.row(
            "8",
            f"raw query where user_id (partition {mid:,}), {total:,} in all",
            p50=fmt_ms(filtered.p50),
            p95=fmt_ms(filtered.p95),
            value=f"no filter {fmt_ms(unfiltered.p50)}; numpy scan {fmt_ms(scan.p50)}",
            target="info",
        )


# ---------------------------------------------------------------------------
# Item 1: read_memory vs raw query
# ---------------------------------------------------------------------------


async def bench_read(ctx: ModeContext) -> None:
    ds, rt, reps = ctx.ds, ctx.rt, ctx.scale.reps
    rng = random.Random(21)
    for partition in (ds.mid, ds.big):
        idx = ds.indices(partition)
        raw: list[float] = []
        ours: list[float] = []
        for k in range(reps + 3):
            vector = ds.vectors[idx[rng.randrange(len(idx))]].tolist()

            def raw_query(v: list[float] = vector, p: str = partition) -> None:
                _raw_query(ctx, p, v)

            async def our_query(v: list[float] = vector, p: str = partition) -> None:
                await rt.store.query_vector(view_of(p), v, top_k=5)

            if k % 2:  # alternate which side runs first
                t_raw = timed_sync(raw_query)
                t_ours = await timed(our_query)
            else:
                t_ours = await timed(our_query)
                t_raw = timed_sync(raw_query)
            if k >= 3:  # warm-up
                raw.append(t_raw)
                ours.append(t_ours)
        s_raw, s_ours = Summary.of(raw), Summary.of(ours)
        ctx.read_p50[partition] = s_ours
        r = s_ours.p50 / s_raw.p50
        ctx.row(
            "1",
            f"MemoryStore.query_vector vs raw query, {ctx.label(partition)}",
            p50=fmt_ms(s_ours.p50),
            p95=fmt_ms(s_ours.p95),
            value=f"{r:.2f}× (raw p50 {fmt_ms(s_raw.p50)}, p95 {fmt_ms(s_raw.p95)})",
            target=f"≤ {READ_TARGET}×",
            verdict=verdict(r <= READ_TARGET),
        )
        # End to end through the tool, with the embedding call shown apart.
        caller = caller_of(ds, partition)
        e2e: list[float] = []
        emb: list[float] = []
        for k in range(reps + 3):
            text = ds.docs[idx[rng.randrange(len(idx))]]
            t_emb = await timed(lambda t=text: rt.embedder.embed([t]))
            result: dict[str, Any] = {}

            async def call(t: str = text, c: Scope = caller, out: dict[str, Any] = result) -> None:
                out.update(await rt.tools.read_memory(c, {"query": t, "top_k": 5, "scope": "user"}))

            t_e2e = await timed(call)
            if not result.get("ok"):
                raise RuntimeError(f"read_memory failed: {result}")
            if k >= 3:
                emb.append(t_emb)
                e2e.append(t_e2e)
        s_e2e, s_emb = Summary.of(e2e), Summary.of(emb)
        ctx.row(
            "1",
            f"MemoryTools.read_memory end to end, {ctx.label(partition)}",
            p50=fmt_ms(s_e2e.p50),
            p95=fmt_ms(s_e2e.p95),
            value=(
                f"embedding alone p50 {fmt_ms(s_emb.p50)}; minus it: "
                f"{(s_e2e.p50 - s_emb.p50) / s_raw.p50:.2f}× the raw query"
            ),
            target="info",
        )


# ---------------------------------------------------------------------------
# Item 2: get / update / delete by id
# ---------------------------------------------------------------------------


def _add_victims(ctx: ModeContext, partition: str, tag: str, n: int) -> list[str]:
    """Add ``n`` throw-away memories to ``partition`` (raw, not timed) for delete timings."""
    ds = ctx.ds
    ids = [f"victim-{tag}-{partition}-{i}" for i in range(n)]
    vec = ds.vectors[ds.indices(partition)[0]]
    ctx.col.add(
        ids=ids,
        documents=[f"待删除 {i}" for i in range(n)],
        embeddings=np.repeat(vec[None, :], n, axis=0),
        metadatas=[
            memory_metadata(partition, "low", "2025-01-01T00:00:00+00:00", "[]") for _ in ids
        ],
    )
    return ids


async def _by_id_samples(
    ctx: ModeContext, store: MemoryStore, tag: str
) -> dict[tuple[str, str], Summary]:
    """get / update / delete by id on the small and the big partition, interleaved."""
    ds, reps = ctx.ds, ctx.scale.reps
    rng = random.Random(31)
    small, big = ds.small, ds.big
    victims = {p: _add_victims(ctx, p, tag, reps + 3) for p in (small, big)}
    samples: dict[tuple[str, str], list[float]] = {
        (o, p): [] for o in BY_ID_OPS for p in (small, big)
    }
    for k in range(reps + 3):
        for partition in (small, big) if k % 2 else (big, small):
            idx = ds.indices(partition)
            mid = ds.ids[idx[rng.randrange(len(idx))]]
            t_get = await timed(lambda p=partition, m=mid: store.get(view_of(p), m))
            level = ("low", "medium", "high")[k % 3]
            t_upd = await timed(
                lambda p=partition, m=mid, lv=level: store.update(
                    p, m, importance=lv, tags=["基准", lv]
                )
            )
            victim = victims[partition][k]
            t_del = await timed(lambda p=partition, v=victim: store.delete(p, v))
            if k >= 3:
                samples[("get", partition)].append(t_get)
                samples[("update", partition)].append(t_upd)
                samples[("delete", partition)].append(t_del)
    return {key: Summary.of(values) for key, values in samples.items()}


async def bench_by_id(ctx: ModeContext) -> None:
    ds, col, reps = ctx.ds, ctx.col, ctx.scale.reps
    small, big = ds.small, ds.big
    ours = await _by_id_samples(ctx, ctx.rt.store, "ours")
    for op in BY_ID_OPS:
        s_small, s_big = ours[(op, small)], ours[(op, big)]
        r = s_big.p50 / s_small.p50
        ctx.fact(f"by_id.{op}.ratio", r)
        ctx.row(
            "2",
            f"MemoryStore.{op} by id, {ctx.label(big)} vs {ctx.label(small)}",
            p50=fmt_ms(s_big.p50),
            p95=fmt_ms(s_big.p95),
            value=f"{r:.2f}× (small p50 {fmt_ms(s_small.p50)})",
            target=f"≤ {BY_ID_TARGET}×",
            verdict=verdict(r <= BY_ID_TARGET),
        )
    # Attribution: the lookup with and without the partition filter, and the raw writes.
    rng = random.Random(33)
    raw: dict[str, list[float]] = {}
    for partition in (small, big):
        idx = ds.indices(partition)
        victims = _add_victims(ctx, partition, "raw", reps)
        for k in range(reps):
            mid = ds.ids[idx[rng.randrange(len(idx))]]
            raw.setdefault(f"plain.{partition}", []).append(
                timed_sync(lambda m=mid: col.get(ids=[m], include=["documents", "metadatas"]))
            )
            raw.setdefault(f"where.{partition}", []).append(
                timed_sync(
                    lambda m=mid, p=partition: col.get(
                        ids=[m], where={"user_id": p}, include=["documents", "metadatas"]
                    )
                )
            )
            meta = memory_metadata(partition, "high", "2025-01-01T00:00:00+00:00", "[]")
            raw.setdefault(f"update.{partition}", []).append(
                timed_sync(lambda m=mid, mt=meta: col.update(ids=[m], metadatas=[mt]))
            )
            raw.setdefault(f"delete.{partition}", []).append(
                timed_sync(lambda v=victims[k]: col.delete(ids=[v]))
            )
    for partition in (small, big):
        s_plain = Summary.of(raw[f"plain.{partition}"])
        s_where = Summary.of(raw[f"where.{partition}"])
        s_upd = Summary.of(raw[f"update.{partition}"])
        s_del = Summary.of(raw[f"delete.{partition}"])
        ctx.fact(f"raw_get_where.{ctx.ds.size(partition)}", s_where.p50)
        ctx.fact(f"raw_get_plain.{ctx.ds.size(partition)}", s_plain.p50)
        ctx.fact(f"raw_update.{ctx.ds.size(partition)}", s_upd.p50)
        ctx.row(
            "2",
            f"raw get(ids, where user_id), {ctx.label(partition)}",
            p50=fmt_ms(s_where.p50),
            p95=fmt_ms(s_where.p95),
            value=(
                f"get(ids) alone {fmt_ms(s_plain.p50)}; raw update {fmt_ms(s_upd.p50)}, "
                f"raw delete {fmt_ms(s_del.p50)}"
            ),
            target="info",
        )


# ---------------------------------------------------------------------------
# Item 3: write_memory throughput vs raw single adds
# ---------------------------------------------------------------------------


async def _write_round(
    ctx: ModeContext,
    tools: MemoryTools,
    partition: str,
    texts: Iterator[str],
    vectors: dict[str, list[float]],
    written: list[str],
) -> tuple[Summary, Summary]:
    """Single writes, ours and raw alternated; returns (ours, raw) latencies."""
    caller = caller_of(ctx.ds, partition)
    col = ctx.col
    raw: list[float] = []
    ours: list[float] = []
    for k in range(ctx.scale.write_reps + 3):
        t1, t2 = next(texts), next(texts)
        raw_id = f"rawadd-{partition}-{t1[:12]}-{k}"
        meta = memory_metadata(partition, "medium", "2025-06-01T00:00:00+00:00", '["基准"]')
        result: dict[str, Any] = {}

        def raw_add(t: str = t1, i: str = raw_id, m: dict[str, Any] = meta) -> None:
            col.add(ids=[i], documents=[t], embeddings=[vectors[t]], metadatas=[m])  # type: ignore[list-item]

        async def our_add(t: str = t2, c: Scope = caller, out: dict[str, Any] = result) -> None:
            out.update(
                await tools.write_memory(
                    c, {"content": t, "tags": ["基准"], "importance": "medium", "scope": "user"}
                )
            )

        if k % 2:
            t_raw = timed_sync(raw_add)
            t_ours = await timed(our_add)
        else:
            t_ours = await timed(our_add)
            t_raw = timed_sync(raw_add)
        if not result.get("ok"):
            raise RuntimeError(f"write_memory failed: {result}")
        written += [raw_id, result["memory"]["id"]]
        if k >= 3:
            raw.append(t_raw)
            ours.append(t_ours)
    return Summary.of(ours), Summary.of(raw)


async def bench_write(ctx: ModeContext) -> None:
    from amrita_plugin_memory.storage.memory_store import MemoryStore
    from amrita_plugin_memory.tools.memory_tools import MemoryTools
    from tests.servers import embed_text

    ds, rt, col, n = ctx.ds, ctx.rt, ctx.col, ctx.scale.write_reps
    texts = [f"基准写入 {i}：用户提到要在周六去看一场话剧" for i in range(8 * (n + 3))]
    vectors = {t: embed_text(t, ds.vectors.shape[1]) for t in texts}
    store = MemoryStore(rt.connection, precomputed_embedder(vectors), rt.store.name)
    limit = rt.config.file.per_session_memory_limit
    tools = MemoryTools(store, rt.memo, calendar=rt.calendar, memory_limit=limit)
    written: list[str] = []
    text_iter = iter(texts)
    for partition in (ds.small, ds.big):
        s_ours, s_raw = await _write_round(ctx, tools, partition, text_iter, vectors, written)
        s_count = Summary.of(
            [
                await timed(lambda p=partition: store.count(view_of(p)))
                for _ in range(ctx.scale.reps)
            ]
        )
        tput_raw, tput_ours = 1 / s_raw.mean, 1 / s_ours.mean
        r = tput_ours / tput_raw
        size = ds.size(partition)
        ctx.fact(f"write.ratio.{size}", r)
        ctx.fact(f"write.count_p50.{size}", s_count.p50)
        ctx.fact(f"write.raw_p50.{size}", s_raw.p50)
        ctx.fact(f"write.ours_p50.{size}", s_ours.p50)
        ctx.row(
            "3",
            f"write_memory (embedding excluded) vs raw add, {ctx.label(partition)}",
            p50=fmt_ms(s_ours.p50),
            p95=fmt_ms(s_ours.p95),
            value=(
                f"{r:.2f}× ({tput_ours:,.0f} vs {tput_raw:,.0f} writes/s; raw add p50 "
                f"{fmt_ms(s_raw.p50)}; count() p50 {fmt_ms(s_count.p50)})"
            ),
            target=f"≥ {WRITE_TARGET}×",
            verdict=verdict(r >= WRITE_TARGET),
        )
    emb = Summary.of([await timed(lambda t=t: rt.embedder.embed([t])) for t in texts[: n + 3]][3:])
    ctx.row(
        "3",
        "embedding of one memory (HTTP, shown apart)",
        p50=fmt_ms(emb.p50),
        p95=fmt_ms(emb.p95),
        target="info",
    )
    col.delete(ids=written)  # leave the collection as it was


# ---------------------------------------------------------------------------
# Item 8: read at the full size vs an exact numpy scan, and filter profile
# ---------------------------------------------------------------------------


async def bench_physical_limit(ctx: ModeContext) -> None:
    ds, col, reps = ctx.ds, ctx.col, ctx.scale.reps
    rng = random.Random(41)
    total = len(ds.ids)
    for partition in (ds.mid, ds.big):
        scan = _numpy_scan(ds, partition, reps, rng)
        ours = ctx.read_p50[partition]
        ctx.fact(f"scan.{ds.size(partition)}", scan.p50)
        ctx.fact(f"read.{ds.size(partition)}", ours.p50)
        ctx.row(
            "8",
            f"read_memory (wrapper) vs numpy exact scan, {ctx.label(partition)}, {total:,} in all",
            p50=fmt_ms(ours.p50),
            p95=fmt_ms(ours.p95),
            value=f"{ours.p50 / scan.p50:,.0f}× the scan (scan p50 {fmt_ms(scan.p50)})",
            target="info",
        )
    # Where the time of a filtered query goes: the metadata filter alone.
    for partition in (ds.mid, ds.big):
        listing = Summary.of(
            [
                timed_sync(lambda p=partition: col.get(where={"user_id": p}, include=[]))
                for _ in range(reps)
            ]
        )
        first = Summary.of(
            [
                timed_sync(lambda p=partition: col.get(where={"user_id": p}, limit=1, include=[]))
                for _ in range(reps)
            ]
        )
        ctx.fact(f"where_list.{ds.size(partition)}", listing.p50)
        ctx.fact(f"where_first.{ds.size(partition)}", first.p50)
        ctx.row(
            "8",
            f"raw get(where user_id) ids only, {ctx.label(partition)}, {total:,} in all",
            p50=fmt_ms(listing.p50),
            p95=fmt_ms(listing.p95),
            value=f"with limit=1: p50 {fmt_ms(first.p50)}",
            target="info",
        )
