"""Finishing or dropping a remap that was interrupted (crash, kill, outage), and its checks.

Must run before anything else touches the covered collections; see
:mod:`.remap` for why the decision below is always correct. Also here: the
"remap running" marker writers obey (:func:`mark_running`,
:func:`clear_running`) and :func:`verify_searchable`, the check every
re-embedding passes before it reports success or writes a fingerprint.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import random
import socket
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from nonebot.log import logger

from ..core.errors import VectorStoreError
from ..core.text import short_error
from .errors import RemapError
from .fingerprint import FingerprintInfo
from .maintenance import (
    MARKER_KEYS,
    META_REEMBED_COMPLETE,
    META_REEMBED_RUNNING,
    META_REEMBED_TARGET,
    Covered,
    Maintenance,
    meta_of,
    open_collection,
    replace_meta,
    user_meta,
)

__all__ = [
    "VERIFY_SAMPLE",
    "RemapVerifyError",
    "clear_running",
    "finalize_remap",
    "mark_running",
    "recover_interrupted_remap",
    "still_running",
    "swap_collections",
    "verify_searchable",
]


class RemapVerifyError(RemapError):
    """Re-embedded records are not found by vector search: nothing is reported done."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"检索校验失败：{detail}；未写入新指纹")


VERIFY_SAMPLE = 16
"""Records per collection that :func:`verify_searchable` must find by vector search."""

_VERIFY_TOP_K = 10
_VERIFY_WIDE_K = 100
"""Second try of the partition query when the first missed: Chroma's filtered HNSW
search is approximate in large partitions (measured: 1 of 16 sampled records of a
10,000-memory partition, 100,000 in all, was not among its own 10 nearest), and a
wider search finds what the index really holds; a record that is not indexed is
missed by both."""
_SAME_POINT = 1e-4
"""A distance this small means "the same vector" (exact duplicates may tie)."""


async def mark_running(maint: Maintenance, kind: str) -> None:
    """Set the "remap running" marker on every existing covered collection.

    Writers (memory tools, the knowledge base) refuse while it is set, in
    this and in every other process (see ``storage.chroma.remap_markers.CollectionGuard``).
    """
    note = json.dumps(
        {
            "kind": kind,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": datetime.now(UTC).isoformat(timespec="seconds"),
        }
    )
    for cov in maint.covered:
        col = await open_collection(maint.connection, cov.name)
        if col is not None:
            await replace_meta(maint.connection, col, {**meta_of(col), META_REEMBED_RUNNING: note})
    maint.store.invalidate()


async def still_running(maint: Maintenance) -> bool:
    """Whether every existing covered collection still carries the "running" marker."""
    for cov in maint.covered:
        col = await open_collection(maint.connection, cov.name)
        if col is not None and not meta_of(col).get(META_REEMBED_RUNNING):
            return False
    return True


async def clear_running(maint: Maintenance) -> bool:
    """Remove the "running" marker from the covered collections; whether one was set."""
    found = False
    for cov in maint.covered:
        col = await open_collection(maint.connection, cov.name)
        if col is None:
            continue
        meta = meta_of(col)
        if not meta.get(META_REEMBED_RUNNING):
            continue
        found = True
        rest = {k: v for k, v in meta.items() if k != META_REEMBED_RUNNING}
        # Chroma refuses empty metadata: an empty marker means "not running".
        await replace_meta(maint.connection, col, rest or {META_REEMBED_RUNNING: ""})
    maint.store.invalidate()
    return found


async def finalize_remap(
    maint: Maintenance, target: FingerprintInfo, names: Sequence[Covered]
) -> None:
    """Write the fingerprint and remove the markers (the last step of a remap)."""
    conn = maint.connection
    for cov in names:  # knowledge first, memory (the fingerprint that counts) last
        col = await open_collection(conn, cov.name)
        if col is None:
            continue
        meta = meta_of(col)
        if cov.role != "memory" and not any(k in meta for k in MARKER_KEYS):
            continue  # untouched knowledge or archive collection (not part of this remap)
        await replace_meta(conn, col, {**user_meta(meta), **target.as_meta()})
    maint.store.invalidate()


async def swap_collections(maint: Maintenance, names: Sequence[Covered]) -> None:
    """Replace each original by its complete temporary (knowledge first, memory last)."""
    conn = maint.connection
    for cov in names:
        existing = await conn.list_collections()
        if cov.temp not in existing:
            continue
        if cov.name in existing:
            await conn.delete_collection(cov.name)
        await conn.rename_collection(cov.temp, cov.name)
        logger.info(f"[Memory] 已切换集合 {cov.name}")
    maint.store.invalidate()


async def _missing_from_search(maint: Maintenance, name: str) -> tuple[int, list[str]]:
    """``(sampled, ids not found)`` for a random sample of ``name``."""
    conn = maint.connection
    col = await open_collection(conn, name)
    if col is None:
        raise RemapVerifyError(f"集合 {name} 不存在")
    ids = list((await conn.run(functools.partial(col.get, include=[])))["ids"])
    if not ids:
        return 0, []
    sample = random.sample(ids, min(VERIFY_SAMPLE, len(ids)))
    try:
        got = await conn.run(
            functools.partial(col.get, ids=sample, include=["embeddings", "metadatas"])
        )
    except VectorStoreError as exc:
        raise RemapVerifyError(f"集合 {name} 的向量无法读取（{short_error(exc)}）") from exc
    vectors = got.get("embeddings")
    metas = got.get("metadatas") or [None] * len(got["ids"])
    missing = sorted(set(sample) - set(got["ids"]))
    for i, item_id in enumerate(got["ids"]):
        vector = [float(x) for x in vectors[i]] if vectors is not None else None
        if vector is None or not await _found(conn, col, item_id, vector, metas[i]):
            missing.append(item_id)
    return len(sample), missing


async def _found(
    conn: Any, col: Any, item_id: str, vector: list[float], meta: Mapping[str, Any] | None
) -> bool:
    """Whether a query with the item's own vector finds it, alone and as a search does."""
    try:
        res = await conn.run(
            functools.partial(
                col.query, query_embeddings=[vector], ids=[item_id], n_results=1, include=[]
            )
        )
        if item_id not in (res["ids"][0] if res["ids"] else []):
            return False
        partition = (meta or {}).get("user_id")
        if not isinstance(partition, str):
            return True
        # The path of read_memory without the partition index: neighbours filtered by partition.
        for top_k in (_VERIFY_TOP_K, _VERIFY_WIDE_K):
            res = await conn.run(
                functools.partial(
                    col.query,
                    query_embeddings=[vector],
                    where={"user_id": partition},
                    n_results=top_k,
                    include=["distances"],
                )
            )
            found = res["ids"][0] if res["ids"] else []
            dists = (res.get("distances") or [[]])[0]
            if item_id in found or (len(found) == top_k and dists[-1] <= _SAME_POINT):
                return True
            if len(found) < top_k:
                return False  # the whole partition was searched: no wider try to make
    except VectorStoreError as exc:
        logger.warning(f"[Memory] 检索校验：查询 {item_id} 出错：{short_error(exc)}")
        return False
    return False


async def verify_searchable(maint: Maintenance, names: Sequence[str]) -> None:
    """Check, in a fresh client, that re-embedded records are found by vector search.

    The connection's client is closed and reopened first (``refresh``), so the
    check sees what the next process (the bot after a CLI command) will load,
    not this process's in-memory index. For a random sample of each
    collection, a query with the record's own stored vector must return it,
    restricted to its id and, for memories, among the nearest neighbours
    within its partition (the path of ``read_memory``). Raises
    :class:`RemapVerifyError`; callers then neither report success nor write
    the new fingerprint.
    """
    await asyncio.to_thread(maint.connection.refresh)
    maint.store.invalidate()
    for name in names:
        sampled, missing = await _missing_from_search(maint, name)
        if missing:
            raise RemapVerifyError(
                f"集合 {name} 中抽查的 {sampled} 条里有 {len(missing)} 条无法被向量检索找到"
                f"（如 {', '.join(missing[:3])}）"
            )
        logger.debug(f"[Memory] 检索校验通过：{name}（抽查 {sampled} 条）")


async def recover_interrupted_remap(maint: Maintenance) -> str | None:
    """Finish a committed remap or drop an uncommitted one; ``None`` if there was none.

    Must run before anything else touches the covered collections (see the
    module docstring for why this is always correct). A committed remap is
    finished only after :func:`verify_searchable` passed; a "running"
    marker left by an interrupted remap is removed (writers resume).
    """
    conn = maint.connection
    names = maint.covered
    *others, memory = names  # knowledge and archive, then memory (see Maintenance.covered)
    existing = set(await conn.list_collections())
    temps = [cov for cov in names if cov.temp in existing]
    memory_temp = await open_collection(conn, memory.temp) if memory.temp in existing else None
    memory_col = await open_collection(conn, memory.name) if memory.name in existing else None
    target: FingerprintInfo | None = None
    if memory_temp is not None and meta_of(memory_temp).get(META_REEMBED_COMPLETE) is True:
        target = FingerprintInfo.from_json(meta_of(memory_temp).get(META_REEMBED_TARGET))
    elif memory_col is not None and META_REEMBED_TARGET in meta_of(memory_col):
        target = FingerprintInfo.from_json(meta_of(memory_col).get(META_REEMBED_TARGET))
    if target is None:
        # Not committed: the originals are complete; temporaries are leftovers.
        for cov in temps:
            await conn.delete_collection(cov.temp)
        marked = await clear_running(maint)
        if temps or marked:
            logger.warning(
                "[Memory] 发现上次未完成的重映射留下的临时集合或维护标记，已清理"
                f"（{', '.join(c.temp for c in temps) or '维护标记'}）；原集合完好"
            )
            return "dropped"
        return None
    logger.warning("[Memory] 发现上次已提交但未切换完成的重映射，正在完成切换…")
    for other in others:
        if other.temp not in existing:
            continue
        col = await open_collection(conn, other.temp)
        if col is not None and meta_of(col).get(META_REEMBED_COMPLETE) is not True:
            await conn.delete_collection(other.temp)  # cannot happen; be safe
    await swap_collections(maint, names)
    present = set(await conn.list_collections())
    await verify_searchable(maint, [cov.name for cov in names if cov.name in present])
    await finalize_remap(maint, target, names)
    logger.info(f"[Memory] 已完成上次中断的重映射：{target.describe()}")
    return "finished"
