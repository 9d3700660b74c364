"""The start-up check (the spec's flowchart), run at plugin import before anything registers."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from nonebot.log import logger

from ..core.errors import DataDirLocked, EmbeddingError, VectorStoreError
from ..infra.terminal import ask_yes_no, stdin_is_tty
from ..upkeep.rekey import KeyMigrationReport, migrate_partition_keys
from .adoption import AdoptionReport, adopt_published_memories
from .client import EmbeddingConfigError
from .errors import BackupError, RemapError
from .fingerprint import (
    FINGERPRINT_KEYS,
    FingerprintInfo,
    current_fingerprint,
    stored_fingerprint,
    write_fingerprint,
)
from .maintenance import Maintenance, count_of, meta_of, open_collection, replace_meta, user_meta
from .recovery import recover_interrupted_remap
from .remap import RemapReport, remap

__all__ = [
    "StartupAction",
    "StartupResult",
    "record_fingerprint_at_first_embedding",
    "run_startup_check",
    "run_startup_check_async",
]

T = TypeVar("T")

StartupAction = Literal[
    "skipped",  # AMBOT_COMMAND_CONTEXT=1 or EMBED_CHECK_ON_STARTUP=false
    "fresh",  # empty collections: fingerprint written
    "match",  # fingerprint matches
    "kept",  # mismatch, kept as is (never, or ask answered no)
    "remapped",  # mismatch, re-embedded
    "remap_failed",  # mismatch, re-embedding failed (data intact, old fingerprint)
    "refused",  # mismatch, ask without a TTY: the plugin must not register
    "unavailable",  # embedding service or Chroma unreachable: not checked this time
    "misconfigured",  # EMBEDDING_MODEL_NAME=auto cannot tell the model: fix the configuration
    "locked",  # local data dir held by another process: the plugin must not register
    "keyword_only",  # EMBEDDING_ENABLED=false: nothing embedded, no fingerprint compared
]


@dataclass(frozen=True, slots=True)
class StartupResult:
    """Outcome of :func:`run_startup_check`; ``ok`` says whether the plugin may register."""

    ok: bool
    action: StartupAction
    message: str
    stored: FingerprintInfo | None = None
    current: FingerprintInfo | None = None
    migration: KeyMigrationReport | None = None
    remap: RemapReport | None = None
    adoption: AdoptionReport | None = None
    """Memories of the published plugin made this plugin's (``None``: not run this time)."""


def _mismatch_text(stored: FingerprintInfo | None, current: FingerprintInfo, count: int) -> str:
    before = stored.describe() if stored else "未记录（可能由旧版本插件写入）"
    return f"嵌入配置已变更：已存储 {before}，当前 {current.describe()}；现有 {count} 条向量与当前模型不匹配"


async def _covered_count(maint: Maintenance) -> int:
    """Vectors in the memory and knowledge collections (a missing collection holds none)."""
    total = 0
    for cov in maint.covered:
        col = await open_collection(maint.connection, cov.name)
        if col is not None:
            total += await count_of(maint.connection, col)
    return total


async def _record_if_still_empty(maint: Maintenance) -> bool:
    """At the first successful embedding: record the fingerprint if the store still holds nothing.

    Returns ``True`` when done (recorded, or not ours to record).
    """
    current = await current_fingerprint(maint.embedder)  # resolved by that embedding
    memory = await open_collection(maint.connection, maint.store.name)
    stored = FingerprintInfo.from_meta(meta_of(memory)) if memory is not None else None
    if stored is not None and (
        stored.fingerprint == current.fingerprint or stored.same_service(current)
    ):
        return True  # recorded meanwhile (another process, `ambot memory reset-fingerprint`)
    count = await _covered_count(maint)
    if count:
        logger.warning(
            f"[Memory] 嵌入服务已可用，但记忆库已有 {count} 条向量且没有与当前配置一致的嵌入指纹，"
            "不自动记录指纹；下次启动时按 EMBED_MISMATCH_POLICY 处理"
        )
        return True
    await write_fingerprint(maint.store, current)
    logger.info(f"[Memory] 嵌入服务已可用，记忆库为空：已记录嵌入指纹 {current.describe()}")
    return True


def record_fingerprint_at_first_embedding(maint: Maintenance) -> None:
    """Arm the embedder: the first successful embedding records the fingerprint.

    For a first start before the embedding service is up (a common Docker
    start order): without this, memories written later carry no fingerprint
    and the next start finds "data without a fingerprint" and refuses to load
    under ``ask``. The hook runs before the embedding's vectors are returned,
    serialised (see :meth:`~.client.EmbeddingClient.run_after_embedding`), so
    no write of this process can land between the emptiness check and the
    fingerprint write; a store that holds vectors by then (older data, another
    process on a remote Chroma) is not given a fingerprint it may not match.
    (Chroma has no transactions: another process writing in the instant
    between the check and the metadata write is not covered.)
    """

    async def hook() -> bool:
        try:
            return await _record_if_still_empty(maint)
        except (VectorStoreError, EmbeddingError) as exc:
            logger.warning(f"[Memory] 记录嵌入指纹失败，下次嵌入时重试：{exc}")
            return False

    maint.embedder.run_after_embedding(hook)


async def _migrate_url_form(
    maint: Maintenance, stored: FingerprintInfo, current: FingerprintInfo
) -> None:
    """Record this plugin's fingerprint for vectors of the same model and service (no
    re-embedding): stored under another spelling of the URL, or by the published plugin."""
    await write_fingerprint(maint.store, current)
    knowledge = await open_collection(maint.connection, maint.covered[0].name)
    if knowledge is not None and any(k in meta_of(knowledge) for k in FINGERPRINT_KEYS):
        meta = meta_of(knowledge)
        await replace_meta(maint.connection, knowledge, {**user_meta(meta), **current.as_meta()})
    if stored.published:
        logger.info(
            f"[Memory] 沿用嵌入指纹 {stored.describe()}（同一服务、同一模型，无需重新嵌入）"
        )
        return
    logger.info(
        f"[Memory] 嵌入指纹中的服务地址 {stored.base_url} 已迁移为规范形式 {current.base_url}"
        "（同一服务、同一模型，无需重新嵌入）"
    )


async def run_startup_check_async(
    maint: Maintenance, *, interactive: bool, confirm: Callable[[str], bool]
) -> StartupResult:
    """The startup check (spec flowchart) on the caller's event loop.

    Order: finish/drop an interrupted remap (a prerequisite of touching the
    collections at all), key migration (idempotent, O(1) once current), the
    adoption of the published plugin's memories (:mod:`.adoption`, O(1) once
    done), then the fingerprint comparison and ``EMBED_MISMATCH_POLICY``.
    """
    env = maint.env
    adoption: AdoptionReport | None = None
    try:
        await recover_interrupted_remap(maint)
        migration = await migrate_partition_keys(maint.store)
        if migration.rewritten:
            logger.info(f"[Memory] 已迁移 {migration.rewritten} 条记忆的分区键到当前格式")
        try:
            adoption = await adopt_published_memories(maint)
        except BackupError as exc:  # nothing rewritten; read as they are, retried next start
            logger.error(
                f"[Memory] 无法在接管已发布插件的记忆前备份，本次不转换（下次启动重试）：{exc}"
            )
        stored = await stored_fingerprint(maint.store)
        knowledge = await open_collection(maint.connection, maint.covered[0].name)
        count = await maint.store.count_all()
        if knowledge is not None:
            count += await count_of(maint.connection, knowledge)
    except DataDirLocked as exc:
        msg = f"[Memory] {exc}。插件未启用（Bot 继续运行）"
        logger.error(msg)
        return StartupResult(False, "locked", msg)
    except VectorStoreError as exc:
        # Possibly a first start with Chroma and the embedding service both
        # still starting: the first embedding records the fingerprint if the
        # store turns out to be empty then.
        record_fingerprint_at_first_embedding(maint)
        msg = f"[Memory] 启动检查跳过：{exc}。记忆工具会在向量库恢复后可用，下次启动重新检查"
        logger.warning(msg)
        return StartupResult(True, "unavailable", msg)

    if not maint.embedder.enabled:
        msg = (
            "[Memory] 无嵌入模式（EMBEDDING_ENABLED=false）：按关键词检索，不加载嵌入模型；"
            "已有向量原样保留，重新开启嵌入后自动为新记忆补上向量"
        )
        logger.info(msg)
        return StartupResult(True, "keyword_only", msg, stored, None, migration, adoption=adoption)
    try:
        current = await current_fingerprint(maint.embedder, probe=True)
    except EmbeddingConfigError as exc:
        msg = (
            f"[Memory] 嵌入模型配置问题：{exc}。插件照常加载，"
            "但在 .env 中设置 EMBEDDING_MODEL_NAME 并重启 Bot 之前，记忆工具都会报错"
        )
        logger.warning(msg)
        return StartupResult(
            True, "misconfigured", msg, stored=stored, migration=migration, adoption=adoption
        )
    except EmbeddingError as exc:
        later = "下次启动重新检查"
        if count == 0:
            record_fingerprint_at_first_embedding(maint)
            later = "记忆库为空：嵌入服务可用后，首次嵌入时自动记录嵌入指纹"
        msg = (
            f"[Memory] 无法确定当前嵌入模型，暂不校验嵌入指纹：{exc}。"
            f"插件照常加载，记忆工具在嵌入服务可用前会报错；{later}"
        )
        logger.warning(msg)
        return StartupResult(
            True, "unavailable", msg, stored=stored, migration=migration, adoption=adoption
        )

    if count == 0:
        if stored is None or stored.fingerprint != current.fingerprint:
            await write_fingerprint(maint.store, current)
        msg = f"[Memory] 记忆库为空，已记录嵌入指纹：{current.describe()}"
        logger.debug(msg)
        return StartupResult(True, "fresh", msg, stored, current, migration, adoption=adoption)
    if stored is not None and (stored.published or stored.fingerprint != current.fingerprint):
        if stored.fingerprint == current.fingerprint or stored.same_service(current):
            await _migrate_url_form(maint, stored, current)
            stored = current
    if stored is not None and stored.fingerprint == current.fingerprint:
        return StartupResult(
            True, "match", "[Memory] 嵌入指纹一致", stored, current, migration, adoption=adoption
        )

    mismatch = _mismatch_text(stored, current, count)
    policy = env.embed_mismatch_policy
    if count == await maint.store.count_pending():
        # No stored vector at all (written with EMBEDDING_ENABLED=false, or only during
        # outages): re-embedding loses nothing, whatever the policy.
        mismatch = f"记忆库中的 {count} 条记忆都还没有向量（此前未使用嵌入模型），按当前模型补齐"
        policy = "auto"
    if policy == "ask" and not interactive:
        msg = (
            f"[Memory] {mismatch}。EMBED_MISMATCH_POLICY=ask 需要交互确认，但当前不是交互终端，"
            "插件未启用（Bot 继续运行）。请任选其一：设置 EMBED_MISMATCH_POLICY=auto 自动重映射；"
            "设置 EMBED_MISMATCH_POLICY=never 保留旧向量继续运行（检索会劣化）；"
            "或停止 Bot 后运行 `ambot memory reindex` 重映射"
            "（模型实际未变时用 `ambot memory reset-fingerprint`）"
        )
        logger.error(msg)
        return StartupResult(False, "refused", msg, stored, current, migration, adoption=adoption)
    if policy == "ask":
        question = (
            f"[Memory] {mismatch}。\n"
            f"是否现在用新模型重映射全部 {count} 条（先自动备份）？选否则保留旧向量继续运行"
        )
        if not confirm(question):
            policy = "never"
    if policy == "never":
        msg = (
            f"[Memory] {mismatch}。已按策略保留现有数据继续运行，语义检索结果会劣化；"
            "运行 `ambot memory reindex` 重映射，或 `ambot memory reset-fingerprint` 确认模型未变"
        )
        logger.warning(msg)
        return StartupResult(True, "kept", msg, stored, current, migration, adoption=adoption)

    logger.warning(f"[Memory] {mismatch}，开始重映射…")
    try:
        report = await remap(maint)
    except (RemapError, EmbeddingError, VectorStoreError, BackupError) as exc:
        msg = (
            f"[Memory] {exc if isinstance(exc, RemapError) else '重映射失败：' + str(exc)}。"
            "插件照常加载但检索会劣化；修复后重启 Bot 自动重试，或停止 Bot 后运行 "
            "`ambot memory reindex`"
        )
        logger.error(msg)
        return StartupResult(
            True, "remap_failed", msg, stored, current, migration, adoption=adoption
        )
    msg = f"[Memory] 重映射完成：{report.total} 条，备份 {report.backup}"
    return StartupResult(True, "remapped", msg, stored, current, migration, report, adoption)


def _run_in_private_loop(factory: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to completion on a private event loop in a worker thread.

    A worker thread is used whether or not the calling thread runs a loop: it
    works inside pytest/nonebug (a loop is running) and leaves the main
    thread's event-loop state untouched for ``ambot run`` (no loop yet).
    """
    box: dict[str, Any] = {}

    def target() -> None:
        async def main() -> T:
            return await factory()

        try:
            box["value"] = asyncio.run(main())
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, name="amrita-memory-startup-check", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def run_startup_check(
    maint: Maintenance,
    *,
    interactive: bool | None = None,
    confirm: Callable[[str], bool] | None = None,
) -> StartupResult:
    """The synchronous startup check the plugin runs at import time.

    ``AMBOT_COMMAND_CONTEXT=1`` (an ``ambot memory …`` command) or
    ``EMBED_CHECK_ON_STARTUP=false`` skip it. ``interactive`` defaults to
    whether stdin is a TTY and ``confirm`` to ``click.confirm``. The work runs
    on a private event loop; the embedding client's HTTP session opened there
    is closed before returning (it is recreated lazily on the bot's loop).
    """
    if os.environ.get("AMBOT_COMMAND_CONTEXT") == "1":
        return StartupResult(True, "skipped", "[Memory] 命令行上下文，跳过启动检查")
    if not maint.env.embed_check_on_startup:
        msg = "[Memory] EMBED_CHECK_ON_STARTUP=false，跳过嵌入指纹检查"
        logger.info(msg)
        return StartupResult(True, "skipped", msg)
    is_tty = stdin_is_tty() if interactive is None else interactive
    ask = confirm or ask_yes_no

    async def work() -> StartupResult:
        try:
            return await run_startup_check_async(maint, interactive=is_tty, confirm=ask)
        finally:
            # The private loop's database tasks (a feed row announcing the re-read
            # collection) end before the loop does, which would cancel them mid-statement.
            await maint.store.coherence.settle()
            await maint.embedder.close()  # the private loop's session, inside the set-aside block

    try:
        with maint.embedder.session_set_aside():
            return _run_in_private_loop(work)
    except Exception as exc:  # never take the bot down because of the check itself
        msg = f"[Memory] 启动检查出错，跳过：{exc.__class__.__name__}: {exc}；下次启动重新检查"
        logger.exception(msg)
        return StartupResult(True, "unavailable", msg)
