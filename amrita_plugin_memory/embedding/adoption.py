"""At start-up: memories the published ``amrita-plugin-memory`` wrote, made this plugin's, once.

Part of the start-up check (:mod:`.startup`, after the key migration, before the
fingerprint). The collection metadata records the state, so the work is done once and a
kill half-way loses nothing:

1. ``memory_metadata_format`` is current → nothing to do (one metadata read per start);
2. no memory in the published form → the format is recorded (an own store's first start);
3. otherwise a backup of every covered collection (:func:`.backup.create_backup`, the
   data exactly as the published plugin left it), its name recorded as
   ``published_adoption_backup`` (a later start that finds it makes no second backup);
4. the rows are rewritten (``upkeep/adoption``: each row once, the next start finishes
   what a killed one left), then the format is recorded.

Works alike on an embedded store and on a Chroma server (the markers live in the
collection). The fingerprint keys the published plugin left in the collection metadata
are read by :mod:`.fingerprint` (same model, same service: nothing is re-embedded).
"""

from __future__ import annotations

from dataclasses import dataclass

from nonebot.log import logger

from ..storage.published.memories import META_FORMAT, META_FORMAT_CURRENT
from ..upkeep.adoption import adopt_rows, rows_to_adopt
from .backup import create_backup
from .maintenance import Maintenance

__all__ = ["META_ADOPTION_BACKUP", "AdoptionReport", "adopt_published_memories"]

META_ADOPTION_BACKUP = "published_adoption_backup"
"""Collection metadata: the backup made before the rewrite began (a resumed run makes none)."""


@dataclass(frozen=True, slots=True)
class AdoptionReport:
    """What :func:`adopt_published_memories` found and did."""

    adopted: int = 0
    backup: str = ""
    skipped: bool = False
    resumed: bool = False


async def adopt_published_memories(maint: Maintenance) -> AdoptionReport:
    """Rewrite memories still in the published plugin's form (see the module docstring).

    Raises :class:`~..core.errors.VectorStoreError` when Chroma fails and
    :class:`~.errors.BackupError` when no backup can be written (then nothing is
    rewritten; the next start tries again).
    """
    store = maint.store
    meta = await store.get_metadata()
    if meta.get(META_FORMAT) == META_FORMAT_CURRENT:
        return AdoptionReport(skipped=True)
    pending = await rows_to_adopt(store)
    if not pending:
        await store.set_meta({META_FORMAT: META_FORMAT_CURRENT})
        return AdoptionReport()
    backup = meta.get(META_ADOPTION_BACKUP)
    resumed = isinstance(backup, str) and bool(backup)
    if resumed:
        logger.warning(
            f"[Memory] 继续上次中断的接管：还有 {pending} 条已发布插件写入的记忆（接管前的备份 {backup}）"
        )
    else:
        logger.warning(
            f"[Memory] 发现 {pending} 条由已发布的 amrita-plugin-memory 写入的记忆，先备份再转为本插件的格式"
        )
        info = await create_backup(maint)
        backup = info.path.name
        await store.set_meta({META_ADOPTION_BACKUP: backup})
    done = await adopt_rows(store)
    await store.set_meta({META_FORMAT: META_FORMAT_CURRENT})
    logger.info(
        f"[Memory] 已接管已发布插件写入的 {done.adopted} 条记忆（标签、时间与来源已补齐；"
        f"来源未记录的个人记忆只在用户私聊中显示，群记忆属于各自的群）；接管前的备份 {backup}"
    )
    return AdoptionReport(done.adopted, str(backup), resumed=resumed)
