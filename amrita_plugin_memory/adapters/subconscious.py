"""Starting the L3 loop inside a running bot: hooks, knowledge tools, driver events."""

from __future__ import annotations

from nonebot import logger

from ..services import MemoryRuntime
from ..subconscious import create_runner
from ..subconscious.runner import SubconsciousRunner
from ..upkeep.users.user_data import UserData
from .knowledge_surface import SURFACE
from .subconscious_hooks import SubconsciousHooks

__all__ = ["bind_user_data", "setup_subconscious"]


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


def bind_user_data(runner: SubconsciousRunner, data: UserData) -> None:
    """A user's export and forget in this process go through the running loop: its state
    document (saved whole by the loop), its profile (under its edit lock), and its fence,
    so that a forget of the target user stops the running cycle and the planned one
    (``SubconsciousRunner.forgetting``)."""
    data.loop = runner.loop_state
    data.loop_target = runner.target_user_id
    data.profile = runner.profile
    data.forget_fences.append(runner.forgetting)
