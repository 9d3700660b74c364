"""The loop while it runs: its state, what tool groups see of it, and one cycle.

**One cycle.** LOAD_STATE (the state's rows) → JINJA2_RENDER (the main
template) → LIMIT_HISTORY (the target's recent chat, bounded; :mod:`.workflow`)
→ BUILD_MESSAGE → REACT_BLOCK (Core's ReAct strategy on the isolated tool set).
Afterwards the usage is added once to Amrita's statistics and each request to
the usage ledger (:mod:`.spend`; a ``[budget]`` cap postpones a cycle to the
next day), the abstract is saved and every tool group with an ``on_cycle_end``
hook learns the outcome.

:class:`LoopCycles` is the half of :class:`~.runner.SubconsciousRunner` that
runs cycles and implements :class:`~.context.LoopContext`; the runner (which
inherits it) builds the parts it names and owns scheduling, start and shutdown.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

import jinja2
from amrita_core import BackendSlots, ChatObject, NullBillingBackend
from amrita_core.chatmanager.chat_libs import ChatManager
from amrita_core.tools.manager import MultiToolsManager
from nonebot import logger

from ..core.calendar import OwnerCalendar
from ..core.config import SubconsciousConfig
from ..services import MemoryRuntime
from ..storage.keys import ChatTarget
from ..storage.scope import Scope
from .amrita_data import AmritaData
from .backend import SubconsciousBackend, build_cycle_tools
from .cycle_end import end_cycle, record_cycle
from .fence import CycleFence
from .prompts import compression_hint, format_abstracts, format_last_run, render_cycle_input
from .scheduling import RunPlanner, cycle_lease
from .spend import budget_gate, record_spend, tokens_text
from .state import LoopState
from .templates import PromptError, PromptTemplates, format_time
from .toolsets.base import ToolGroup
from .types import Cycle, CycleOutcome, CycleResult, StateData
from .workflow import cycle_workflow, strategy_for

__all__ = ["LoopCycles"]

T = TypeVar("T")

_TRAIN_TEMPLATE = jinja2.Template("{{ train.content }}")
"""The ChatObject's train template: the system prompt is exactly our rendered prompt."""


class LoopCycles:
    """Runs the cycles of one target user's loop (set up by :class:`~.runner.SubconsciousRunner`).

    The attributes below are set by the runner's constructor.
    """

    runtime: MemoryRuntime
    config: SubconsciousConfig
    calendar: OwnerCalendar
    target: ChatTarget
    target_user_id: str
    templates: PromptTemplates
    loop_state: LoopState
    planner: RunPlanner
    data: AmritaData
    fence: CycleFence
    tools: MultiToolsManager
    tool_groups: list[ToolGroup]
    active: bool
    current_cycle: Cycle | None
    _chat: ChatObject | None
    _cycle_lock: asyncio.Lock
    _idle: asyncio.Event

    # -- LoopContext -------------------------------------------------------------------

    @property
    def state(self) -> StateData:  # a view: LOAD_STATE and every change refresh it
        return self.loop_state.data

    async def load_state(self) -> StateData:
        return await self.loop_state.load()  # LOAD_STATE: the stored rows into `state`

    async def mutate_state(
        self, change: Callable[[StateData], T], *, since: float | None = None
    ) -> T:
        """Apply ``change`` to :attr:`state` and persist it (:meth:`.LoopState.mutate`)."""
        return await self.loop_state.mutate(change, since=since)

    async def may_act(self) -> bool:
        """No forget of the target user since the cycle began (:meth:`.CycleFence.may_act`)."""
        return await self.fence.may_act(self.current_cycle)

    def render_guide(self, key: str) -> str:
        """Render a guide template (``prompt_knowledge_file`` / ``prompt_profile_file``) for
        tool groups' prompt sections; :class:`PromptError` (the cycle fails cleanly) if broken."""
        now, target = format_time(self.calendar.now()), self.target_user_id
        return self.templates.render(key, {"current_time": now, "target_user_id": target})

    # -- one cycle ----------------------------------------------------------------------------------

    async def _system_prompt(self, memory_count: int) -> str:
        """JINJA2_RENDER: the main template, the groups' sections and the compression hint."""
        now = self.calendar.now()
        prompt = self.templates.render(
            "prompt_file",
            {
                "character_prompt": self.data.character_prompt() or "（未设置）",
                "last_run": format_last_run(self.state, self.calendar),
                "last_abstracts": format_abstracts(self.state, self.calendar),
                "current_time": format_time(now),
                "target_user_id": self.target_user_id,
                "total_runs": self.state["total_runs"],
            },
        )
        sections = [prompt]
        for group in self.tool_groups:
            section = (await group.prompt_section()).strip()
            if section:
                sections.append(section)
        hint = compression_hint(memory_count, self.config.memory_warn_threshold)
        if hint:
            sections.append(hint)
        return "\n\n".join(sections)

    async def _user_input(self, cycle: Cycle, memory_count: int) -> str:
        """BUILD_MESSAGE: the cycle's input (the recent chat is appended by LIMIT_HISTORY)."""
        memo = self.runtime.memo
        return render_cycle_input(
            cycle.number,
            memory_count=memory_count,
            memory_limit=self.runtime.tools.memory_limit,
            memo=await memo.get(Scope.of_loop(self.target).view("user")),
            memo_limit=memo.max_chars,
            pending=len(self.state["pending_messages"]),
        )

    async def run_cycle(self) -> CycleResult:
        """Run one cycle now (the planned job calls this too); never raises."""
        if not self.active:
            return CycleResult(0, "skipped", error="runner is shut down")
        if self._cycle_lock.locked():
            logger.info("[Subconscious] A cycle is already running; skipped")
            return CycleResult(0, "skipped", error="a cycle is already running")
        leases = self.runtime.store.coherence.leases
        async with self._cycle_lock, cycle_lease(leases, self.target_user_id) as mine:
            if not mine:
                return CycleResult(0, "skipped", error="another process runs this target's cycle")
            self._idle.clear()
            try:
                return await self._run_cycle()
            finally:
                self.current_cycle = None
                self._chat = None
                self._idle.set()

    async def _run_cycle(self) -> CycleResult:
        started, epoch = time.monotonic(), self.fence.epoch
        if self.fence.forgets:
            return CycleResult(0, "skipped", error="the target user is being forgotten")
        if held := await budget_gate(
            self.runtime.budget, self.planner, Scope.of_loop(self.target).user_view()
        ):
            return held  # a [budget] cap: the next run is planned for tomorrow
        try:
            await self.load_state()
        except Exception as exc:
            logger.error(
                f"[Subconscious] 读取循环状态失败，本轮取消：{exc.__class__.__name__}: {exc}"
            )
            return CycleResult(0, "failed", error=f"state: {exc}")
        cycle = Cycle(
            number=self.state["total_runs"] + 1,
            compress_history=self.config.enable_memory_compress,
            epoch=epoch,
        )
        self.current_cycle = cycle
        label = f"Cycle #{cycle.number}"
        logger.info(
            f"[Subconscious] {label} started for user={self.target_user_id} (penalty={self.planner.penalty})"
        )

        try:
            view = Scope.of_loop(self.target).view("user")
            memory_count = await self.runtime.store.count(view)
            system_prompt = await self._system_prompt(memory_count)
            user_input = await self._user_input(cycle, memory_count)
            preset = await self.data.resolve_preset()
            config = self.data.loop_config()
        except PromptError as exc:
            logger.error(f"[Subconscious] {label} aborted: {exc}")
            await end_cycle(self.tool_groups, cycle, "failed")
            return CycleResult(
                cycle.number, "failed", error=str(exc), seconds=time.monotonic() - started
            )
        except Exception as exc:
            logger.error(
                f"[Subconscious] {label} aborted before the agent started: {exc.__class__.__name__}: {exc}"
            )
            await end_cycle(self.tool_groups, cycle, "failed")
            return CycleResult(
                cycle.number, "failed", error=str(exc), seconds=time.monotonic() - started
            )

        tools = build_cycle_tools(self.tools, self.config.allowed_tools, warn=logger.warning)
        backend = SubconsciousBackend(tools, preset, await self.data.chat_snapshot())
        chat = ChatObject(
            train={"role": "system", "content": system_prompt},
            user_input=user_input,
            session_id=f"subconscious:{self.target.user}",
            config=config,
            preset=preset,
            backend=BackendSlots(backend, backend, NullBillingBackend()),
            chat_man=ChatManager(),
            train_template=_TRAIN_TEMPLATE,
            agent_strategy=strategy_for(cycle),
            hook_args=(cycle,),
            exception_ignored=(Exception,),
            workflow=cycle_workflow(),
        )
        self._chat = chat
        error: BaseException | None = None
        try:
            chat.begin()
            await chat.full_response()  # drain the stream, or the run blocks on it
            await chat
        except asyncio.CancelledError as exc:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                chat.terminate()  # we are being cancelled ourselves: take the agent down too
                raise
            error = exc  # the ChatObject was terminated (shutdown)
        except Exception as exc:
            error = exc

        usage = cycle.usage.extra_total if cycle.usage is not None else None
        await self.data.add_usage(usage)
        await record_spend(self.runtime.budget, self.target_user_id, cycle.usage)
        if error is not None:
            outcome: CycleOutcome = "failed"
            reason = (
                "被终止"
                if isinstance(error, asyncio.CancelledError)
                else f"{error.__class__.__name__}: {error}"
            )
            summary = f"运行失败（{reason[:200]}）；在此之前：{cycle.describe_actions()}"
        elif cycle.interrupted and not cycle.stop_requested:
            outcome = "interrupted"
            summary = f"用户开始聊天，本轮提前结束；在此之前：{cycle.describe_actions()}"
        else:
            outcome = "success"
            summary = (
                cycle.stop_summary
                or f"未调用 subconscious_iter_stop 而结束；{cycle.describe_actions()}"
            )
        if await self.fence.may_act(cycle):  # a forgotten user's cycle keeps no abstract
            await record_cycle(
                self, cycle, outcome, summary, max_abstracts=self.config.max_abstracts
            )
        await end_cycle(self.tool_groups, cycle, outcome)
        if outcome == "success":
            self.planner.penalty = 0
        result = CycleResult(
            cycle.number,
            outcome,
            summary=summary,
            error=None if error is None else str(error) or error.__class__.__name__,
            usage=usage,
            seconds=time.monotonic() - started,
            actions=dict(cycle.actions),
        )
        log = logger.info if outcome != "failed" else logger.error
        log(
            f"[Subconscious] {label} {outcome} in {result.seconds:.1f}s "
            f"(tokens in/out {tokens_text(usage)}, {cycle.describe_actions()}, penalty={self.planner.penalty})"
            + (f": {result.error}" if result.error else "")
        )
        return result
