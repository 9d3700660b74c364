"""Finishing or dropping a remap that was interrupted (crash, kill, outage).

Must run before anything else touches the covered collections; see
:mod:`.remap` for why the decision below is always correct.
"""

from __future__ import annotations

from collections.abc import Sequence

from nonebot.log import logger

from .covered import (
    MARKER_KEYS,
    META_REEMBED_COMPLETE,
    META_REEMBED_TARGET,
    Covered,
    Maintenance,
    meta_of,
    open_collection,
    replace_meta,
    user_meta,
)
from .fingerprint import FingerprintInfo

__all__ = ["finalize_remap", "recover_interrupted_remap", "swap_collections"]


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
        if cov.role == "knowledge" and not any(k in meta for k in MARKER_KEYS):
            continue  # untouched knowledge collection (not part of this remap)
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


async def recover_interrupted_remap(maint: Maintenance) -> str | None:
    """Finish a committed remap or drop an uncommitted one; ``None`` if there was none.

    Must run before anything else touches the covered collections (see the
    module docstring for why this is always correct).
    """
    conn = maint.connection
    names = maint.covered
    knowledge, memory = names
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
        if temps:
            logger.warning(
                "[Memory] 发现上次未完成的重映射留下的临时集合，已清理"
                f"（{', '.join(c.temp for c in temps)}）；原集合完好"
            )
            return "dropped"
        return None
    logger.warning("[Memory] 发现上次已提交但未切换完成的重映射，正在完成切换…")
    if knowledge.temp in existing:
        col = await open_collection(conn, knowledge.temp)
        if col is not None and meta_of(col).get(META_REEMBED_COMPLETE) is not True:
            await conn.delete_collection(knowledge.temp)  # cannot happen; be safe
    await swap_collections(maint, names)
    await finalize_remap(maint, target, names)
    logger.info(f"[Memory] 已完成上次中断的重映射：{target.describe()}")
    return "finished"
