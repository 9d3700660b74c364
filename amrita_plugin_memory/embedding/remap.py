"""Safe re-embedding: :func:`remap` (live contents) and :func:`restore_backup` (a file).

Both re-embed every covered collection (the memories and the L3 knowledge
base, see :mod:`.maintenance`) with the current model; :func:`reset_fingerprint`
is the escape hatch that writes the fingerprint without re-embedding.

Safety of a remap (nothing may ever be lost)
--------------------------------------------
1. A JSON backup (ids, documents, metadatas; no vectors) of every covered
   collection is written first, atomically, readable only by the owner.
2. The live collections get a "running" marker: writers in every process
   refuse ("记忆库维护中") while it is set (``storage.chroma.remap_markers.CollectionGuard``).
   A restore waits ``REMAP_GRACE`` before its backup, so every write
   acknowledged before the marker took effect is in that backup.
3. Every covered collection ``X`` is re-embedded page by page into a new
   temporary collection ``X__reembed``; the original stays untouched. Writes
   that were acknowledged meanwhile (remote Chroma: other processes) are
   applied to the temporary by a catch-up pass, repeated until a pass that
   starts ``REMAP_GRACE`` after the marker finds nothing: an acknowledged
   write always landed before that (see ``CollectionGuard``), so the remap
   finishes however busy the bot is, and loses nothing it acknowledged.
4. The temporaries are verified in a fresh client (vector search finds a
   sample of them, :func:`.recovery.verify_searchable`), then marked
   ``reembed_complete=true`` — the knowledge temporary first, the memory
   temporary **last**. Marking the memory temporary is the single atomic
   *commit point* of the remap.
5. Then the swap: for the knowledge and then the memory collection, delete the
   original and rename the temporary to the original name
   (``collection.modify(name=...)``, verified on chromadb 1.5.9, embedded and
   remote). The new collection carries the target fingerprint as a marker.
6. The swapped-in collections are verified again in a fresh client; only then
   is the fingerprint written and are the markers removed.

Why a kill at any instant is safe: before the commit point the originals are
complete and unchanged and the next start (or command) drops the incomplete
or uncommitted temporaries and the "running" marker — a clean retry. After
the commit point every temporary that still exists is complete, so
:func:`recover_interrupted_remap` (run before anything else touches the
collections) finishes the swap: it deletes an original that still exists,
renames the temporary, verifies, and writes the fingerprint recorded in the
marker (the fingerprint of the vectors, not of the possibly changed current
configuration). "Committed" is recognised either by the memory temporary's
``reembed_complete`` marker or, once it was renamed, by the marker carried by
the memory collection itself; the knowledge collection is always swapped
before the memory collection, so a committed state never has an unswapped
knowledge temporary without a memory marker.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from nonebot.log import logger

from ..storage.chroma.connection import ChromaConnection
from ..storage.chroma.remap_markers import WRITE_WINDOW
from ..storage.memory_store import READ_PAGE_SIZE, iter_pages
from ..upkeep.rekey import migrate_partition_keys
from .backup import create_backup, load_backup
from .errors import RemapError, RemapFailed
from .fingerprint import FingerprintInfo, current_fingerprint, write_fingerprint
from .forgotten import drop_forgotten
from .maintenance import (
    META_REEMBED_COMPLETE,
    Covered,
    Maintenance,
    apply_live_changes,
    count_of,
    drop_collection,
    meta_of,
    open_collection,
    replace_meta,
    space_of,
    user_meta,
)
from .rebuild import Plan, ProgressCallback, build_temp, list_pages
from .recovery import (
    RemapVerifyError,
    clear_running,
    finalize_remap,
    mark_running,
    recover_interrupted_remap,
    still_running,
    swap_collections,
    verify_searchable,
)

if TYPE_CHECKING:
    from chromadb.api.models.Collection import Collection

__all__ = ["RemapReport", "remap", "reset_fingerprint", "restore_backup"]


@dataclass(slots=True)
class RemapReport:
    """What a remap (or restore) did."""

    fingerprint: FingerprintInfo
    backup: Path | None
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


REMAP_GRACE = WRITE_WINDOW + 1.0
"""Seconds after the "running" marker before a remote remap's final pass (see the docstring)."""

CATCH_UP_PASSES = 20
"""Catch-up passes before a remap gives up on a collection that keeps changing."""


def _grace(conn: ChromaConnection) -> float:
    """How long writers may still land a write after the marker (see ``CollectionGuard``).

    Embedded Chroma is locked to this process (``flock``): when this process
    never wrote through a guard (the CLI, the start-up check before the bot
    serves), nobody can be writing and there is nothing to wait for.
    """
    return REMAP_GRACE if conn.mode == "remote" or conn.writers_seen else 0.0


async def _catch_up(
    maint: Maintenance, plans: list[Plan], temps: dict[str, Collection], since: float
) -> None:
    """Apply to the temporaries what writers changed in the live collections meanwhile.

    Repeated until a pass that started at least ``_grace`` after the marker
    (``since``) changes nothing; see the module docstring for why that pass
    sees every acknowledged write.
    """
    live = [p for p in plans if p.live is not None]
    if not live:
        return
    settled_at = since + _grace(maint.connection)
    for _ in range(CATCH_UP_PASSES):
        final = time.monotonic() >= settled_at
        if final and not await still_running(maint):
            # A concurrent metadata write replaced ours: mark again and wait again.
            await mark_running(maint, "reindex")
            settled_at = time.monotonic() + _grace(maint.connection)
            final = settled_at <= time.monotonic()
        changed = 0
        for plan in live:
            assert plan.live is not None
            changed += await apply_live_changes(maint, plan.live, temps[plan.cov.role])
        if changed:
            logger.info(f"[Memory] 重映射期间的 {changed} 处改动已同步到新集合")
        elif final:
            return
        if not final:
            await asyncio.sleep(max(0.0, settled_at - time.monotonic()))
    raise RemapError("重映射期间集合持续被修改，未能追平；请稍后重试")


async def _run_remap(
    maint: Maintenance,
    plans: list[Plan],
    target: FingerprintInfo,
    backup: Path | None,
    progress: ProgressCallback | None,
    since: float,
) -> RemapReport:
    """Build, catch up, verify, commit, swap, verify, finalize (see the module docstring)."""
    conn = maint.connection
    names = maint.covered
    total = sum(p.expected for p in plans)
    done = [0]
    temps: dict[str, Collection] = {}
    counts: dict[str, int] = {}
    try:
        for plan in sorted(plans, key=lambda p: p.cov.role != "memory"):  # memory first
            temps[plan.cov.role] = await build_temp(maint, plan, target, done, total, progress)
        await _catch_up(maint, plans, temps, since)
        await verify_searchable(maint, [p.cov.temp for p in plans])
        # Commit: knowledge and archive temporaries first, memory last (the commit point).
        for role in ("knowledge", "archive", "memory"):
            plan = next((p for p in plans if p.cov.role == role), None)
            if plan is None:
                continue
            col = await open_collection(conn, plan.cov.temp)  # a fresh handle after verify
            if col is None:
                raise RemapError(f"临时集合 {plan.cov.temp} 不见了")
            counts[plan.cov.name] = await count_of(conn, col)
            await replace_meta(conn, col, {**meta_of(col), META_REEMBED_COMPLETE: True})
    except BaseException as exc:
        # Before the commit point: drop the temporaries, the originals are untouched.
        for plan in plans:
            with contextlib.suppress(Exception):
                await drop_collection(conn, plan.cov.temp)
        with contextlib.suppress(Exception):
            await clear_running(maint)  # writers may go on
        if isinstance(exc, Exception):
            raise RemapFailed(exc, backup) from exc
        raise
    try:
        await swap_collections(maint, names)
        await verify_searchable(maint, [p.cov.name for p in plans])
        await finalize_remap(maint, target, names)
    except RemapVerifyError as exc:
        raise RemapError(
            f"{exc}。新集合已就位；下次启动 Bot（或运行 `ambot memory reindex`）时会重新校验，"
            f"仍失败请用 `ambot memory backup restore {backup}` 恢复"
        ) from exc
    except Exception as exc:
        # After the commit point: keep everything; recovery finishes the swap.
        raise RemapError(
            f"重映射已提交，但切换集合时出错：{exc}。新集合已完整、所有记忆都在；"
            "下次启动 Bot（或运行 `ambot memory reindex`）时会自动完成切换"
        ) from exc
    logger.info(f"[Memory] 重映射完成：{sum(counts.values())} 条，新嵌入配置 {target.describe()}")
    return RemapReport(target, backup, counts)


async def _live_plan(maint: Maintenance, cov: Covered) -> Plan | None:
    """Re-embed ``cov`` from its own live contents (``None`` if it does not exist)."""
    conn = maint.connection
    col = await (
        maint.store.collection() if cov.role == "memory" else open_collection(conn, cov.name)
    )
    if col is None:
        return None
    return Plan(
        cov,
        await count_of(conn, col),
        meta_of(col),
        space_of(col),
        functools.partial(iter_pages, conn, col),
        live=col,
    )


async def remap(maint: Maintenance, *, progress: ProgressCallback | None = None) -> RemapReport:
    """Re-embed every covered collection with the current model (``ambot memory reindex``).

    Raises :class:`RemapFailed` (everything as before, backup kept) or, after
    the commit point, whatever interrupted the swap (finished by the next
    :func:`recover_interrupted_remap`). Embedding and Chroma failures that
    happen before the backup propagate unchanged. Writers are refused while
    it runs (:class:`~..core.errors.MaintenanceInProgress`).
    """
    await recover_interrupted_remap(maint)
    target = await current_fingerprint(maint.embedder)
    plans = [plan for cov in maint.covered if (plan := await _live_plan(maint, cov))]
    if sum(p.expected for p in plans) == 0:
        await write_fingerprint(maint.store, target)
        logger.info(f"[Memory] 集合为空，已直接写入嵌入指纹：{target.describe()}")
        return RemapReport(target, None, {p.cov.name: 0 for p in plans})
    # Writers are stopped before the backup (as in restore): a backup taken
    # while the bot writes would see the collection change under it.
    await mark_running(maint, "reindex")
    since = time.monotonic()
    try:
        await asyncio.sleep(_grace(maint.connection))  # writers of other processes stop
        info = await create_backup(maint)
        logger.info(
            f"[Memory] 开始重映射 {sum(p.expected for p in plans)} 条（{target.describe()}），"
            f"备份：{info.path}"
        )
        plans = [plan for cov in maint.covered if (plan := await _live_plan(maint, cov))]
    except BaseException:
        with contextlib.suppress(Exception):
            await clear_running(maint)
        raise
    return await _run_remap(maint, plans, target, info.path, progress, since)


async def restore_backup(
    maint: Maintenance, path: Path, *, progress: ProgressCallback | None = None
) -> RemapReport:
    """Replace the covered collections by a backup's contents, embedded with the current model.

    The current contents are backed up first (the restored file is never
    pruned), after the "running" marker stopped the writers: every write
    acknowledged before is in that backup. Collections missing from the
    backup but present now are re-embedded from their live contents so that
    everything matches the new fingerprint. Uses the same
    temporary-collection-and-swap procedure as :func:`remap`; the partition
    keys are migrated afterwards. Rows of users forgotten since the backup was
    written are left out (:mod:`.forgotten`).
    """
    _, contents = load_backup(path)
    await drop_forgotten(maint.store, contents)
    known = {cov.name for cov in maint.covered}
    for name in sorted(set(contents) - known):
        logger.warning(f"[Memory] 备份中的集合 {name} 不在当前配置中，已忽略")
    await recover_interrupted_remap(maint)
    target = await current_fingerprint(maint.embedder)
    await mark_running(maint, "restore")
    since = time.monotonic()
    try:
        await asyncio.sleep(_grace(maint.connection))  # writers of other processes stop
        plans: list[Plan] = []
        for cov in maint.covered:
            saved = contents.get(cov.name)
            if saved is not None:
                plans.append(
                    Plan(
                        cov,
                        len(saved.items),
                        saved.metadata,
                        saved.space,
                        functools.partial(list_pages, saved.items, READ_PAGE_SIZE),
                    )
                )
                continue
            if (plan := await _live_plan(maint, cov)) is not None:
                plans.append(plan)
        info = await create_backup(maint, protect=[path])
    except BaseException:
        with contextlib.suppress(Exception):
            await clear_running(maint)
        raise
    logger.info(f"[Memory] 从备份 {path} 恢复，恢复前的内容已备份到 {info.path}")
    report = await _run_remap(maint, plans, target, info.path, progress, since)
    await migrate_partition_keys(maint.store)
    return report


async def reset_fingerprint(maint: Maintenance) -> FingerprintInfo:
    """Write the current fingerprint without re-embedding (the escape hatch)."""
    await recover_interrupted_remap(maint)
    info = await current_fingerprint(maint.embedder)
    await write_fingerprint(maint.store, info)
    knowledge = await open_collection(maint.connection, maint.covered[0].name)
    if knowledge is not None:
        meta = meta_of(knowledge)
        await replace_meta(maint.connection, knowledge, {**user_meta(meta), **info.as_meta()})
    logger.warning(f"[Memory] 已重置嵌入指纹为 {info.describe()}（未重新嵌入）")
    return info
