"""The subconscious: the L3 offline consolidation loop (one name in code, config and logs).

The package, its runner (:class:`SubconsciousRunner`), its config section
(``[subconscious]``), its log prefix (``[Subconscious]``) and its loop tools
(``subconscious_*``) all use this name; the docs call it "the L3 loop" (a
"DMN" in the spec). Wired to the chat by :func:`..adapters.subconscious.setup_subconscious`,
which does nothing at all (no hooks, no tools, no
jobs, no files, no tokens) unless ``[subconscious] enabled = true`` and
``target_user_id`` is set. The knowledge base (its loop tools, the chat LLM's
``knowledge_*`` tools, its files and collection) exists only when, in
addition, ``enable_knowledge = true``.
"""

from __future__ import annotations

from nonebot import logger

from ..core.config import SubconsciousConfig
from ..services import MemoryRuntime
from .published_files import set_aside_published_templates
from .runner import SubconsciousRunner
from .types import CycleResult

__all__ = ["CycleResult", "SubconsciousRunner", "create_runner"]


def create_runner(
    runtime: MemoryRuntime, config: SubconsciousConfig | None = None, **kwargs: object
) -> SubconsciousRunner:
    """Build a runner and create its missing prompt templates (the published plugin's are
    set aside first: ``published_files``); registers nothing.

    ``config`` defaults to the runtime's ``[subconscious]`` section; ``kwargs``
    go to :class:`SubconsciousRunner` (``scheduler``, ``state_uid``, ``job_id``,
    ``config_dir``, ``data_dir``). The chat LLM's knowledge tools are offered
    only after :meth:`SURFACE.bind(runner) <..adapters.knowledge_surface.SurfaceKnowledgeTools.bind>`.
    """
    runner = SubconsciousRunner(runtime, config, **kwargs)  # type: ignore[arg-type]
    set_aside_published_templates(runner.templates, runner.profile.path.parent / "backups")
    for path in runner.templates.ensure():
        logger.info(f"[Subconscious] 已创建默认提示词模板 {path}")
    return runner
