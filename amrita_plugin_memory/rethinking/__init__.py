"""L3 offline consolidation loop ("subconscious", DMN).

Entry point: :func:`setup_subconscious`, called by the plugin once the
surface tools are registered. It does nothing at all (no hooks, no tools, no
jobs, no files, no tokens) unless ``[subconscious] enabled = true`` and
``target_user_id`` is set.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nonebot import logger

from .runner import CycleResult, SubconsciousRunner

if TYPE_CHECKING:
    from ..config import SubconsciousConfig
    from ..runtime import MemoryRuntime

__all__ = ["CycleResult", "SubconsciousRunner", "create_runner", "setup_subconscious"]


def create_runner(
    runtime: MemoryRuntime, config: SubconsciousConfig | None = None, **kwargs: object
) -> SubconsciousRunner:
    """Build a runner and create its missing prompt templates; registers nothing.

    ``config`` defaults to the runtime's ``[subconscious]`` section; ``kwargs``
    go to :class:`SubconsciousRunner` (``scheduler``, ``state_uid``, ``job_id``,
    ``config_dir``).
    """
    runner = SubconsciousRunner(runtime, config, **kwargs)  # type: ignore[arg-type]
    for path in runner.templates.ensure():
        logger.info(f"[Subconscious] 已创建默认提示词模板 {path}")
    return runner


def setup_subconscious(runtime: MemoryRuntime) -> SubconsciousRunner | None:
    """Start the L3 loop when configured; ``None`` (and nothing registered) otherwise.

    When enabled: creates the missing prompt templates, builds the runner,
    registers the chat hooks (target-user messages, pending-message
    delivery) and the driver startup / shutdown hooks (load the state and
    idle; stop a running cycle and cancel the planned run).
    """
    config = runtime.config.file.subconscious
    if not config.enabled:
        return None
    if not config.target_user_id.strip():
        logger.warning("[Subconscious] 已启用但 target_user_id 为空，离线巩固循环未启动")
        return None
    from nonebot import get_driver

    from .hooks import SubconsciousHooks

    runner = create_runner(runtime, config)
    hooks = SubconsciousHooks(runner)
    hooks.register()
    runner.hooks = hooks
    driver = get_driver()
    driver.on_startup(runner.start)

    async def stop() -> None:
        hooks.unregister()
        await runner.shutdown()

    driver.on_shutdown(stop)
    return runner
