"""SubconsciousRunner: owns the L3 loop of one target user and runs its cycles.

**A message during a cycle** interrupts it cooperatively: running tool calls
finish, nothing new starts, the cycle ends ``interrupted`` (penalty kept), so
nothing is half written. Shutdown does the same, then ``terminate()``s. A
forget of the target user also fences the cycle: it writes nothing more
(:mod:`.fence`, :meth:`SubconsciousRunner.forgetting`).

**One cycle** is run by :class:`~.cycle_run.LoopCycles`, which the runner
inherits (with the :class:`~.context.LoopContext` tool groups see).

It composes :class:`~.scheduling.RunPlanner`, :class:`~.state.LoopState`,
:class:`~.state.PendingMessages`, :class:`~.templates.PromptTemplates`,
:class:`~.amrita_data.AmritaData`, :class:`~.messaging.Messenger` and the
tool groups of :mod:`.toolsets` (which see it only as a :class:`~.context.LoopContext`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from amrita_core import ChatObject
from amrita_core.tools.manager import MultiToolsManager
from nonebot import logger

from ..core.config import SubconsciousConfig
from ..services import MemoryRuntime
from ..storage.keys import ChatTarget, target_from_ids
from ..storage.scope import Scope
from .amrita_data import AmritaData
from .consts import JOB_ID_PREFIX, SHUTDOWN_GRACE_SECONDS, STATE_UID
from .cycle_run import LoopCycles
from .fence import CycleFence
from .knowledge_base import KnowledgeBaseManager, ValidationReport
from .messaging import Messenger
from .profile_store import ProfileStore
from .published_files import check_adopted_knowledge
from .scheduling import RunPlanner
from .state import LoopState, PendingMessages, StateStore
from .templates import PromptTemplates
from .toolsets.base import ToolGroup, tool_data
from .toolsets.knowledge import KnowledgeToolset
from .toolsets.memo import MemoToolset
from .toolsets.memory import MemoryToolset
from .toolsets.messages import MessageToolset
from .toolsets.profile import ProfileToolset
from .toolsets.review import ReviewToolset
from .toolsets.suggestions import SuggestionToolset
from .types import Cycle, CycleResult

__all__ = ["CycleResult", "SubconsciousRunner"]


class SubconsciousRunner(LoopCycles):
    """Owns and runs the L3 loop for one target user.

    Usable without any registration: tests (and tools) call :meth:`run_cycle`
    and :meth:`on_target_message` directly. :func:`~..adapters.subconscious.setup_subconscious`
    wires it to the chat (hooks) and to the driver (startup / shutdown).
    """

    def __init__(
        self,
        runtime: MemoryRuntime,
        config: SubconsciousConfig | None = None,
        *,
        scheduler: Any | None = None,
        state_uid: str = STATE_UID,
        job_id: str | None = None,
        config_dir: Path | None = None,
        data_dir: Path | None = None,
    ) -> None:
        self.runtime = runtime
        self.calendar = runtime.calendar  # the owner's: the loop's "now" and shown times
        self.config = config or runtime.config.file.subconscious
        self.target_user_id = self.config.target_user_id.strip()
        if not self.target_user_id:
            raise ValueError("SubconsciousRunner needs a target_user_id")
        self.target: ChatTarget = target_from_ids(self.target_user_id)
        self.templates = PromptTemplates(config_dir or runtime.config.config_dir, self.config)
        work = runtime.store.coherence.work  # the process's one bound on the shared tables
        self.state_store = StateStore(state_uid, target=self.target_user_id, work=work)
        self.loop_state = LoopState(self.state_store, max_abstracts=self.config.max_abstracts)
        self.pending = PendingMessages(self.loop_state, self.target_user_id, self.calendar)
        self.job_id = job_id or f"{JOB_ID_PREFIX}:{self.target_user_id}"
        self.planner = RunPlanner(self.config, self.job_id, self.run_cycle, scheduler=scheduler)
        forgotten_at = lambda: runtime.forgotten.forgotten_at(self.target_user_id)  # noqa: E731
        self.data = AmritaData(self.config, self.target.user, forgotten_at=forgotten_at)
        self.fence = CycleFence(forgotten_at=forgotten_at, target=self.target_user_id)
        """Closed by a forget of the target user here (:meth:`forgetting`), or there (the
        shared tombstones, :meth:`may_act`)."""
        self.messenger = Messenger(self.templates, self.data, self.target_user_id, self.calendar)
        self.active = True
        """False after :meth:`shutdown`: hooks and planned runs become no-ops."""
        self.shutdown_grace = SHUTDOWN_GRACE_SECONDS
        """Seconds shutdown waits for a cycle to stop by itself, then again after terminating it."""
        self.tools = MultiToolsManager()
        """The loop's own, isolated tool manager (never the global ``ToolsManager``)."""
        self.tool_groups: list[ToolGroup] = []
        self.current_cycle: Cycle | None = None
        self._chat: ChatObject | None = None
        self._cycle_lock = asyncio.Lock()
        self._idle = asyncio.Event()
        self._idle.set()
        self.hooks: Any = None
        """The chat hooks, when the adapters registered them (see :meth:`shutdown`)."""
        data_dir = data_dir or runtime.config.data_dir
        shared, forgot = runtime.store.coherence, runtime.forgotten.forgotten_at
        self.profile = ProfileStore.of(data_dir, shared, self.target_user_id, forgot)
        """``<data_dir>/user_profile.md``, or the target's row of the shared database (remote)."""
        self.knowledge: KnowledgeBaseManager | None = None
        """The knowledge base (``None``: ``enable_knowledge`` off); nothing on disk before use."""
        if self.config.enable_knowledge:
            self.knowledge = KnowledgeBaseManager(
                root=data_dir,
                connection=runtime.connection,
                embedder=runtime.embedder,
                collection_name=self.config.knowledge_collection_name,
                max_chars=self.config.knowledge_max_chars,
                log=logger.info,
                shared=runtime.store.coherence,  # remote mode: the texts in the shared database
            )
        self.knowledge_validation: asyncio.Task[ValidationReport | None] | None = None
        """The startup check of the knowledge base, run in the background by :meth:`start`."""
        self._add_default_groups()

    def _add_default_groups(self) -> None:
        rt = self.runtime
        # The target's private scope, no group rights; its writes are fenced by a forget.
        scope = Scope.of_loop(self.target, fence=lambda: self.fence.check(self.current_cycle))
        self.add_tool_group(MemoryToolset(self, rt.tools, rt.store, scope).group())
        self.add_tool_group(MemoToolset(self, rt.tools, rt.memo, scope).group())
        self.add_tool_group(ReviewToolset(self.data, self.calendar).group())
        self.add_tool_group(
            MessageToolset(
                self,
                self.pending,
                self.messenger,
                rt.store,
                scope.view("user"),
                can_send=self.config.allow_send_to_user,
            ).group()
        )
        self.profile_tools = ProfileToolset(self, self.profile)
        self.add_tool_group(self.profile_tools)
        self.knowledge_tools: KnowledgeToolset | None = None
        self.suggestions: SuggestionToolset | None = None
        if self.knowledge is not None:
            self.knowledge_tools = KnowledgeToolset(self, self.knowledge)
            self.add_tool_group(self.knowledge_tools)
            self.suggestions = SuggestionToolset(
                self,
                self.knowledge,
                target_user_id=self.target_user_id,
                suggest_from=self.config.knowledge_suggest_from,
            )
            self.add_tool_group(self.suggestions)

    # -- tools -------------------------------------------------------------------

    def add_tool_group(self, group: ToolGroup) -> None:
        """Register a group's tools in the isolated manager (and its prompt section)."""
        gate = lambda: self.fence.tool_call(self.current_cycle)  # noqa: E731
        for tool in group.tools():
            self.tools.register_tool(tool_data(tool, self._cycle_label, gate))
        self.tool_groups.append(group)

    def _cycle_label(self) -> str:
        cycle = self.current_cycle
        return f"Cycle #{cycle.number}" if cycle is not None else "(no cycle)"

    # -- scheduling ------------------------------------------------------------------

    @property
    def penalty(self) -> int:
        return self.planner.penalty

    @penalty.setter
    def penalty(self, value: int) -> None:
        self.planner.penalty = value

    @property
    def next_run_time(self) -> datetime | None:
        return self.planner.next_run_time

    def on_target_message(self) -> None:
        """The target user spoke: interrupt a running cycle, add a penalty, plan one run."""
        if not self.active:
            return
        cycle = self.current_cycle
        if cycle is not None and not cycle.interrupted:
            cycle.interrupted = True
            logger.info(
                f"[Subconscious] Cycle #{cycle.number}: user={self.target_user_id} is chatting; "
                "stopping after the running tool calls"
            )
        self.planner.plan_after_message()

    @asynccontextmanager
    async def forgetting(self, user_id: str) -> AsyncIterator[None]:
        """A forget of ``user_id`` runs inside this (``UserData.forget_fences``). For the
        target user: the planned cycle is cancelled, the running one stops and writes
        nothing more, none starts until the forget ends (:mod:`.fence`); the summaries
        of their archived sessions are dropped."""
        if user_id.strip() != self.target_user_id:
            yield
            return
        try:
            self.planner.cancel()
        except Exception as exc:  # the scheduler may be gone (shutdown): nothing is planned
            logger.debug(f"[Subconscious] cancel planned run on forget: {exc}")
        self.data.session_summaries.clear()
        cycle = self.current_cycle
        if cycle is not None:
            cycle.interrupted = True
        async with self.fence.closed():
            logger.info(f"[Subconscious] user={self.target_user_id} is being forgotten")
            yield

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Driver startup: load the state, check the knowledge base, wait for the user to chat.

        The knowledge base check runs as a background task
        (:attr:`knowledge_validation`): with the embedding service down it
        may wait for timeouts, and must not hold up the bot's startup.
        """
        logger.info(f"[Subconscious] Starting for user={self.target_user_id}")
        try:
            await self.load_state()
        except Exception as exc:
            logger.error(
                f"[Subconscious] 读取循环状态失败，以空状态启动：{exc.__class__.__name__}: {exc}"
            )
        if self.knowledge is not None and self.knowledge_validation is None:
            self.knowledge_validation = asyncio.create_task(
                self.validate_knowledge(), name=f"{self.job_id}:validate-knowledge"
            )
        logger.info("[Subconscious] Idle — waiting for user chat to trigger first run")

    async def validate_knowledge(self) -> ValidationReport | None:
        """Import the published plugin's knowledge base, then repair drift; never raises."""
        kb = self.knowledge
        return await check_adopted_knowledge(kb, self.loop_state) if kb else None

    async def shutdown(self) -> None:
        """Driver shutdown: cancel the planned run and stop a running cycle."""
        self.active = False
        try:
            self.planner.cancel()
        except Exception as exc:  # the scheduler may already be gone
            logger.debug(f"[Subconscious] cancel planned run on shutdown: {exc}")
        validation = self.knowledge_validation
        if validation is not None and not validation.done():
            validation.cancel()
        cycle = self.current_cycle
        if cycle is None:
            return
        cycle.interrupted = True
        try:
            await asyncio.wait_for(self._idle.wait(), self.shutdown_grace)
            return
        except TimeoutError:
            pass
        chat = self._chat
        if chat is not None:
            logger.warning(
                f"[Subconscious] Cycle #{cycle.number} did not stop in time; terminating"
            )
            chat.terminate()
        try:
            await asyncio.wait_for(self._idle.wait(), self.shutdown_grace)
        except TimeoutError:
            logger.warning(f"[Subconscious] Cycle #{cycle.number} still running at shutdown")
