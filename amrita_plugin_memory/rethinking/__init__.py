"""L3 offline consolidation loop ("subconscious", DMN).

Entry point: :func:`setup_subconscious`, called by the plugin once the
surface tools are registered. It does nothing at all (no hooks, no tools, no
jobs, no files, no tokens) unless ``[subconscious] enabled = true`` and
``target_user_id`` is set. The knowledge base (its loop tools, the chat LLM's
``knowledge_*`` tools, its files and collection) exists only when, in
addition, ``enable_knowledge = true``.
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
    ``config_dir``, ``data_dir``). The chat LLM's knowledge tools are offered
    only after :meth:`SURFACE.bind(runner) <.knowledge_tools.SurfaceKnowledgeTools.bind>`.
    """
    runner = SubconsciousRunner(runtime, config, **kwargs)  # type: ignore[arg-type]
    for path in runner.templates.ensure():
        logger.info(f"[Subconscious] 已创建默认提示词模板 {path}")
    return runner


def setup_subconscious(runtime: MemoryRuntime) -> SubconsciousRunner | None:
    """Start the L3 loop when configured; ``None`` (and nothing registered) otherwise.

    When enabled: creates the missing prompt templates, builds the runner,
    registers the chat hooks (target-user messages, pending-message
    delivery), offers the chat LLM the ``knowledge_*`` tools when the
    knowledge base is enabled (registered once per process, shown only while
    the runner is active), and the driver startup / shutdown hooks (load the
    state, check the knowledge base and idle; stop a running cycle and
    cancel the planned run).
    """
    config = runtime.config.file.subconscious
    if not config.enabled:
        return None
    if not config.target_user_id.strip():
        logger.warning("[Subconscious] 已启用但 target_user_id 为空，离线巩固循环未启动")
        return None
    from nonebot import get_driver

    from .hooks import SubconsciousHooks
    from .knowledge_tools import SURFACE

    runner = create_runner(runtime, config)
    hooks = SubconsciousHooks(runner)
    hooks.register()
    runner.hooks = hooks
    if runner.knowledge_tools is not None:
        SURFACE.bind(runner)
    else:
        logger.info("[Subconscious] Knowledge base disabled (enable_knowledge = false)")
    driver = get_driver()
    driver.on_startup(runner.start)

    async def stop() -> None:
        hooks.unregister()
        SURFACE.unbind(runner)
        await runner.shutdown()

    driver.on_shutdown(stop)
    return runner
