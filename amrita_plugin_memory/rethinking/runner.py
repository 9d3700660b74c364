"""SubconsciousRunner: schedules and runs the L3 offline consolidation loop.

**Trigger.** There is no self-loop. Every message of the target user (private
or group) calls :meth:`SubconsciousRunner.on_target_message`: the planned run
is cancelled, the penalty grows by one and a single run is planned after
``min(base × multiplier^(penalty−1), cap)`` minutes (APScheduler ``date``
trigger, timezone-aware). A successful cycle resets the penalty to 0; a
failed or interrupted one keeps it. The penalty lives in memory only.

**A message during a cycle.** The cycle is interrupted cooperatively: tool
calls already running finish, no new model round or tool call starts, the
cycle ends as ``interrupted`` (its abstract and ``total_runs`` are saved, the
penalty is kept) and the run planned by the message stands. So a merge is
never cut between its two tool calls by a message, and nothing is half
written. Shutdown interrupts the same way and cancels the ChatObject
(``terminate()``) only if it does not stop within a few seconds.

**One cycle.** LOAD_STATE (the ``SubconsciousState`` row) → JINJA2_RENDER
(the main template with the spec's variables) → LIMIT_HISTORY (the target's
recent chat, bounded; :mod:`.nodes`) → BUILD_MESSAGE → REACT_BLOCK (Core's
ReAct strategy on the isolated tool set). Afterwards the run's total usage
is added once to Amrita's global statistics and the state is saved, and every
tool group with an ``on_cycle_end`` hook learns the outcome (the knowledge
group then drops the suggestions it showed, on success only).

**Knowledge base and profile.** The profile tools come with every runner; the
knowledge base (:attr:`SubconsciousRunner.knowledge`) and its tools only with
``enable_knowledge``. :meth:`SubconsciousRunner.start` checks the knowledge
base against its files in the background (:meth:`validate_knowledge`).

All state is owned by the runner object (penalty, state document, pending
message claims, isolated tool manager, planned job, session-summary cache,
knowledge base, profile); nothing is kept in module globals. The one
process-wide piece is the registration of the chat LLM's ``knowledge_*``
tools in Amrita's global ``ToolsManager`` (:data:`.knowledge_tools.SURFACE`),
which only points at the runner it serves.
"""

from __future__ import annotations

import asyncio
import copy
import html
import math
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import jinja2
from amrita_core import (
    BackendSlots,
    ChatObject,
    MemoryModel,
    ModelPreset,
    NullBillingBackend,
    ToolContext,
    ToolData,
    ToolFunctionSchema,
    UniResponseUsage,
    call_completion,
    get_last_response,
)
from amrita_core.chatmanager.chat_libs import ChatManager
from amrita_core.components.compaction import ContextCompactor
from amrita_core.config import AmritaConfig
from amrita_core.tools.manager import MultiToolsManager
from amrita_core.types import CONTENT_LIST_TYPE, Message
from jinja2.sandbox import SandboxedEnvironment
from nonebot import logger
from nonebot_plugin_amrita.cache import LRUCache
from nonebot_plugin_orm import get_session

from ..config import SubconsciousConfig
from ..keys import ChatTarget, target_from_ids
from ..models import SubconsciousState, db_now
from ..tools import dump_result
from .backend import SubconsciousBackend, build_cycle_tools
from .consts import (
    DEFAULTS,
    JOB_ID_PREFIX,
    PENDING_MAX,
    SEND_TIMEOUT_SECONDS,
    SESSION_SUMMARY_CACHE_SIZE,
    SHUTDOWN_GRACE_SECONDS,
    STATE_UID,
    TEMPLATE_VARIABLES,
    ensure_prompt_file,
)
from .knowledge import KnowledgeBaseManager, ValidationReport
from .knowledge_tools import KnowledgeTools, ProfileTools
from .nodes import cycle_workflow, strategy_for
from .profile import ProfileStore
from .tools import LoopTool, MessageComposeError, SubconsciousTools, ToolGroup
from .types import (
    AbstractEntry,
    Cycle,
    CycleOutcome,
    PendingMessage,
    StateData,
    empty_state,
    normalize_state,
)

if TYPE_CHECKING:
    from nonebot_plugin_amrita.memory import MemorySessionsSchema

    from ..runtime import MemoryRuntime
    from .hooks import SubconsciousHooks

__all__ = [
    "CycleResult",
    "PendingMessages",
    "PromptError",
    "PromptTemplates",
    "StateStore",
    "SubconsciousRunner",
]

T = TypeVar("T")

_TRAIN_TEMPLATE = jinja2.Template("{{ train.content }}")
"""The ChatObject's train template: the system prompt is exactly our rendered prompt."""


def _now() -> datetime:
    return datetime.now().astimezone()


def _format_time(moment: datetime) -> str:
    weekdays = "一二三四五六日"
    return f"{moment:%Y-%m-%d %H:%M:%S}（周{weekdays[moment.weekday()]}）"


# ---------------------------------------------------------------------------
# Prompt templates
# ---------------------------------------------------------------------------


class PromptError(RuntimeError):
    """A prompt template is missing, unreadable or broken; the message names the file."""


class PromptTemplates:
    """The four Jinja2 templates under ``<config_dir>/prompt/``, read on every use.

    Reading on use means an operator's edit applies to the next cycle without
    a restart. Rendering is sandboxed and strict: a variable the template does
    not get (see :data:`~.consts.TEMPLATE_VARIABLES`) is an error, not an empty
    string, so a typo cannot silently blank a section of the prompt.
    """

    def __init__(self, config_dir: Path, config: SubconsciousConfig) -> None:
        self.config_dir = config_dir
        self.config = config
        self._env = SandboxedEnvironment(
            undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=True
        )

    def path(self, key: str) -> Path:
        """The file of template ``key`` (a config key such as ``prompt_file``)."""
        return self.config_dir / str(getattr(self.config, key))

    def ensure(self) -> list[Path]:
        """Create every missing template from its default; the created paths."""
        created = []
        for key, default in DEFAULTS.items():
            path = self.path(key)
            if ensure_prompt_file(path, default):
                created.append(path)
        return created

    def render(self, key: str, variables: Mapping[str, Any]) -> str:
        """Render template ``key`` with exactly its listed variables."""
        allowed = TEMPLATE_VARIABLES[key]
        given = {name: variables[name] for name in allowed}
        path = self.path(key)
        try:
            source = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise PromptError(f"无法读取提示词模板 {path}：{exc}") from None
        try:
            template = self._env.from_string(source)
            return template.render(**given).strip()
        except jinja2.TemplateSyntaxError as exc:
            raise PromptError(
                f"提示词模板 {path} 第 {exc.lineno} 行语法错误：{exc.message}"
            ) from None
        except jinja2.UndefinedError as exc:
            raise PromptError(
                f"提示词模板 {path} 使用了未定义的变量（{exc.message}）；可用变量：{', '.join(allowed)}"
            ) from None
        except jinja2.TemplateError as exc:
            raise PromptError(f"提示词模板 {path} 渲染失败：{exc}") from None


# ---------------------------------------------------------------------------
# Persistent state
# ---------------------------------------------------------------------------


class StateStore:
    """Reads and writes the loop's row in the ``SubconsciousState`` table."""

    def __init__(self, uid: str = STATE_UID) -> None:
        self.uid = uid

    async def load(self) -> Any:
        """The stored JSON document, or ``None`` when there is no row yet."""
        async with get_session() as session:
            row = await session.get(SubconsciousState, self.uid)
            return copy.deepcopy(row.data) if row is not None else None

    async def save(self, data: StateData) -> None:
        document = copy.deepcopy(dict(data))
        async with get_session() as session:
            row = await session.get(SubconsciousState, self.uid)
            if row is None:
                session.add(SubconsciousState(uid=self.uid, data=document, updated_at=db_now()))
            else:
                row.data = document  # a new object, so the JSON column is marked dirty
                row.updated_at = db_now()
            await session.commit()


class PendingMessages:
    """Messages for the target user's next private turn, delivered exactly once.

    A chat turn *claims* the messages it shows to the model (pre-completion)
    and *confirms* them when it completed (completion hook); only then are
    they removed from the stored state. A turn that failed never confirms:
    its claim is released at the next claim, so the messages are shown again
    in a later turn instead of being lost. Two concurrent turns never both
    claim the same message.
    """

    def __init__(self, runner: SubconsciousRunner) -> None:
        self._runner = runner
        self._claims: dict[str, tuple[Any, list[str]]] = {}

    @property
    def items(self) -> list[PendingMessage]:
        return self._runner.state["pending_messages"]

    async def add(self, intent: str, *, text: str | None = None) -> PendingMessage | None:
        """Queue a message; ``None`` when the queue is full or holds the same intent."""

        def change(state: StateData) -> PendingMessage | None:
            items = state["pending_messages"]
            if len(items) >= PENDING_MAX or any(p["intent"] == intent for p in items):
                return None
            message: PendingMessage = {
                "id": uuid.uuid4().hex,
                "time": _now().isoformat(timespec="seconds"),
                "intent": intent,
            }
            if text:
                message["text"] = text
            items.append(message)
            return message

        message = await self._runner.mutate_state(change)
        if message is not None:
            logger.info(f"[Subconscious] Queued a message for user={self._runner.target_user_id}")
        return message

    def _release_stale(self) -> None:
        for key, (chat, _) in list(self._claims.items()):
            if chat.is_done():
                del self._claims[key]

    def claim(self, chat: Any) -> list[PendingMessage]:
        """The messages ``chat`` (an Amrita ChatObject) should deliver."""
        self._release_stale()
        key = str(chat.stream_id)
        if key in self._claims:
            ids = set(self._claims[key][1])
            return [m for m in self.items if m["id"] in ids]
        taken = {i for _, ids in self._claims.values() for i in ids}
        messages = [m for m in self.items if m["id"] not in taken]
        if messages:
            self._claims[key] = (chat, [m["id"] for m in messages])
        return messages

    async def confirm(self, chat: Any) -> int:
        """``chat`` completed: drop the messages it delivered; how many."""
        claim = self._claims.pop(str(chat.stream_id), None)
        if claim is None:
            return 0
        ids = set(claim[1])

        def change(state: StateData) -> int:
            before = len(state["pending_messages"])
            state["pending_messages"] = [m for m in state["pending_messages"] if m["id"] not in ids]
            return before - len(state["pending_messages"])

        delivered = await self._runner.mutate_state(change)
        if delivered:
            logger.info(
                f"[Subconscious] Delivered {delivered} pending message(s) to user={self._runner.target_user_id}"
            )
        return delivered


# ---------------------------------------------------------------------------
# Runner
# ---------------------------------------------------------------------------


@dataclass(slots=True)
class CycleResult:
    """What one call of :meth:`SubconsciousRunner.run_cycle` did."""

    number: int
    outcome: CycleOutcome | Literal["skipped"]
    summary: str = ""
    error: str | None = None
    usage: UniResponseUsage[int] | None = None
    seconds: float = 0.0
    actions: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.outcome == "success"


def _format_abstract(entry: AbstractEntry) -> str:
    outcome = {"success": "完成", "failed": "失败", "interrupted": "被用户消息打断"}[
        entry["outcome"]
    ]
    when = entry["time"].replace("T", " ")[:16] if entry["time"] else "时间未知"
    return f"{when} 第 {entry['cycle']} 轮（{outcome}）：{entry['summary']}"


def _tokens(usage: UniResponseUsage[int] | None) -> str:
    if usage is None:
        return "0/0"
    return f"{usage.prompt_tokens}/{usage.completion_tokens}"


class SubconsciousRunner:
    """Owns and runs the L3 loop for one target user.

    Usable without any registration: tests (and tools) call :meth:`run_cycle`
    and :meth:`on_target_message` directly. :func:`~.setup_subconscious`
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
        self.config = config or runtime.config.file.subconscious
        self.target_user_id = self.config.target_user_id.strip()
        if not self.target_user_id:
            raise ValueError("SubconsciousRunner needs a target_user_id")
        self.target: ChatTarget = target_from_ids(self.target_user_id)
        self.templates = PromptTemplates(config_dir or runtime.config.config_dir, self.config)
        self.state_store = StateStore(state_uid)
        self.state: StateData = empty_state()
        self.state_lock = asyncio.Lock()
        self.pending = PendingMessages(self)
        self.penalty = 0
        self.active = True
        """False after :meth:`shutdown`: hooks and planned runs become no-ops."""
        self.job_id = job_id or f"{JOB_ID_PREFIX}:{self.target_user_id}"
        self.shutdown_grace = SHUTDOWN_GRACE_SECONDS
        """Seconds shutdown waits for a cycle to stop by itself, then again after terminating it."""
        self._scheduler = scheduler
        self.tools = MultiToolsManager()
        """The loop's own, isolated tool manager (never the global ``ToolsManager``)."""
        self.tool_groups: list[ToolGroup] = []
        self.session_summaries: LRUCache[int, str] = LRUCache(SESSION_SUMMARY_CACHE_SIZE)
        self.current_cycle: Cycle | None = None
        self._chat: ChatObject | None = None
        self._cycle_lock = asyncio.Lock()
        self._idle = asyncio.Event()
        self._idle.set()
        self.hooks: SubconsciousHooks | None = None
        """The chat hooks, when :func:`~.setup_subconscious` registered them."""
        data_dir = data_dir or runtime.config.data_dir
        self.profile = ProfileStore(data_dir)
        """``<data_dir>/user_profile.md`` (created on the first edit)."""
        self.knowledge: KnowledgeBaseManager | None = None
        """The global knowledge base; ``None`` when ``enable_knowledge`` is off.
        Nothing is created on disk before it is used or validated."""
        if self.config.enable_knowledge:
            self.knowledge = KnowledgeBaseManager(
                root=data_dir,
                connection=runtime.connection,
                embedder=runtime.embedder,
                collection_name=self.config.knowledge_collection_name,
                max_chars=self.config.knowledge_max_chars,
                log=logger.info,
            )
        self.knowledge_validation: asyncio.Task[ValidationReport | None] | None = None
        """The startup check of the knowledge base, run in the background by :meth:`start`."""
        self._state_loaded = False
        self.handlers = SubconsciousTools(self)
        for group in self.handlers.groups():
            self.add_tool_group(group)
        self.profile_tools = ProfileTools(self, self.profile)
        self.add_tool_group(self.profile_tools)
        self.knowledge_tools: KnowledgeTools | None = None
        if self.knowledge is not None:
            self.knowledge_tools = KnowledgeTools(self, self.knowledge)
            self.add_tool_group(self.knowledge_tools)

    # -- tools -------------------------------------------------------------------

    def add_tool_group(self, group: ToolGroup) -> None:
        """Register a group's tools in the isolated manager (and its prompt section)."""
        for tool in group.tools():
            self.tools.register_tool(
                ToolData(
                    data=ToolFunctionSchema(function=tool.schema, type="function"),
                    func=self._wrap(tool),
                    custom_run=True,
                )
            )
        self.tool_groups.append(group)

    def _wrap(self, tool: LoopTool) -> Callable[[ToolContext], Awaitable[str]]:
        async def run(ctx: ToolContext) -> str:
            cycle = self.current_cycle
            label = f"Cycle #{cycle.number}" if cycle is not None else "(no cycle)"
            args = ctx.data if isinstance(ctx.data, Mapping) else {}
            try:
                result = await tool.handler(args, ctx)
            except Exception as exc:
                logger.opt(exception=exc).error(f"[Subconscious] {label} tool {tool.name} crashed")
                result = {"ok": False, "error": f"工具内部错误：{exc.__class__.__name__}: {exc}"}
            status = "ok" if result.get("ok") else f"error: {result.get('error')}"
            logger.info(f"[Subconscious] {label} {tool.name} → {status}")
            return dump_result(result)

        run.__name__ = f"subconscious_tool_{tool.name}"
        return run

    # -- scheduling ------------------------------------------------------------------

    @property
    def scheduler(self) -> Any:
        if self._scheduler is None:
            from nonebot_plugin_apscheduler import scheduler

            self._scheduler = scheduler
        return self._scheduler

    def compute_delay(self, penalty: int) -> timedelta:
        """``min(base × multiplier^(penalty−1), cap)`` minutes (penalty below 1 counts as 1)."""
        base = self.config.rethink_base_delay_minutes
        cap = self.config.rethink_max_delay_minutes
        multiplier = self.config.rethink_penalty_multiplier
        exponent = max(penalty, 1) - 1
        if multiplier > 1 and exponent * math.log(multiplier) >= math.log(max(cap / base, 1.0)):
            minutes = cap
        else:
            minutes = min(base * multiplier**exponent, cap)
        return timedelta(minutes=minutes)

    @property
    def next_run_time(self) -> datetime | None:
        """When the planned cycle runs (timezone-aware), ``None`` when nothing is planned."""
        job = self.scheduler.get_job(self.job_id)
        return getattr(job, "next_run_time", None) if job is not None else None

    def cancel_planned(self) -> None:
        if self.scheduler.get_job(self.job_id) is not None:
            self.scheduler.remove_job(self.job_id)

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
        self.cancel_planned()
        self.penalty += 1
        delay = self.compute_delay(self.penalty)
        scheduler = self.scheduler
        run_at = datetime.now(scheduler.timezone) + delay
        scheduler.add_job(
            self._run_planned,
            "date",
            run_date=run_at,
            id=self.job_id,
            replace_existing=True,
            misfire_grace_time=600,
            coalesce=True,
        )
        logger.info(
            f"[Subconscious] Next run in {delay.total_seconds() / 60:.1f} min "
            f"(penalty={self.penalty}, at {run_at:%Y-%m-%d %H:%M:%S %Z})"
        )

    async def _run_planned(self) -> None:
        try:
            await self.run_cycle()
        except Exception as exc:  # never let a cycle take the scheduler down
            logger.opt(exception=exc).error("[Subconscious] Planned run crashed")

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
        """Repair drift between knowledge files, index and vectors; never raises.

        What was repaired is logged by the knowledge base itself; a failure
        (embedding service or vector store down) is logged and retried at the
        next start, the loop runs anyway.
        """
        kb = self.knowledge
        if kb is None:
            return None
        try:
            report = await kb.validate_on_startup()
            entries = len(await kb.list())
        except Exception as exc:
            logger.warning(
                "[Subconscious] 知识库启动校验失败（不影响运行，下次启动时重试）："
                f"{exc.__class__.__name__}: {exc}"
            )
            return None
        if report.unreadable_files:
            logger.warning(
                "[Subconscious] 知识库中有无法解析的文件（已跳过，请手工检查）："
                + ", ".join(report.unreadable_files)
            )
        logger.info(
            f"[Subconscious] Knowledge base checked: {entries} entries"
            + ("" if report.changed else ", nothing to repair")
        )
        return report

    async def shutdown(self) -> None:
        """Driver shutdown: cancel the planned run and stop a running cycle."""
        self.active = False
        try:
            self.cancel_planned()
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

    # -- state -----------------------------------------------------------------------------

    async def load_state(self) -> StateData:
        """LOAD_STATE: read the ``SubconsciousState`` row into :attr:`state`."""
        async with self.state_lock:
            raw = await self.state_store.load()
            self.state = normalize_state(raw, max_abstracts=self.config.max_abstracts)
            self._state_loaded = True
            return self.state

    async def mutate_state(self, change: Callable[[StateData], T]) -> T:
        """Apply ``change`` to :attr:`state` and persist it, serialised with every other change.

        The one way to modify the state (pending messages, knowledge
        suggestions, abstracts), so concurrent writers never lose each other's
        updates. The state is saved whatever ``change`` returns; ``change``
        must not await (it runs under the lock). The stored row is read first
        if it was never loaded, so an early write cannot wipe it.
        """
        async with self.state_lock:
            if not self._state_loaded:
                raw = await self.state_store.load()
                self.state = normalize_state(raw, max_abstracts=self.config.max_abstracts)
                self._state_loaded = True
            result = change(self.state)
            await self.state_store.save(self.state)
            return result

    def format_last_run(self) -> str:
        abstracts = self.state["last_abstracts"]
        return _format_abstract(abstracts[-1]) if abstracts else "（从未运行，这是第一轮）"

    def format_abstracts(self) -> str:
        abstracts = self.state["last_abstracts"]
        if not abstracts:
            return "（暂无记录）"
        return "\n".join(f"- {_format_abstract(e)}" for e in abstracts)

    def render_guide(self, key: str) -> str:
        """Render a guide template (``prompt_knowledge_file`` / ``prompt_profile_file``).

        For tool groups' :meth:`~.tools.ToolGroup.prompt_section`; raises
        :class:`PromptError` (the cycle then fails cleanly) when it is broken.
        """
        return self.templates.render(
            key, {"current_time": _format_time(_now()), "target_user_id": self.target_user_id}
        )

    # -- what the cycle reads ------------------------------------------------------------------

    def character_prompt(self) -> str:
        """The chat plugin's private-chat character prompt ("" when unavailable)."""
        try:
            from amrita.plugins.chat.config import config_manager

            return str(config_manager.private_train.get("content") or "").strip()
        except Exception as exc:
            logger.warning(f"[Subconscious] 读取角色提示词失败：{exc.__class__.__name__}: {exc}")
            return ""

    async def resolve_preset(self) -> ModelPreset:
        """The chat plugin's active preset."""
        from amrita.plugins.chat.utils.preset import resolve_preset

        return await resolve_preset()

    def loop_config(self) -> AmritaConfig:
        """A deep copy of Core's config with the loop's settings applied."""
        from amrita_core import get_config

        config = get_config().model_copy(deep=True)
        config.builtin.tool_calling_mode = "agent"
        config.builtin.loop_reasoning_trigger = self.config.loop_detect_threshold
        config.function_config.agent_tool_call_limit = self.config.max_iterations
        return config

    async def read_chat_memory(self) -> MemoryModel:
        """A copy of the target user's stored private chat (Amrita's memory)."""
        from nonebot_plugin_amrita.memory import CachedUserDataRepository

        stored = (await CachedUserDataRepository().get_memory(self.target.user)).memory_json
        return MemoryModel(messages=copy.deepcopy(stored.messages), abstract=stored.abstract)

    async def read_archived_sessions(self) -> list[MemorySessionsSchema]:
        from nonebot_plugin_amrita.memory import CachedUserDataRepository

        return list(await CachedUserDataRepository().get_sesssions(self.target.user))

    async def summarize_session(
        self,
        session: MemorySessionsSchema,
        *,
        config: AmritaConfig | None,
        preset: ModelPreset | None,
        usage: Any,
    ) -> str:
        """An LLM summary of an archived session, cached by session id (LRU 128)."""
        cached = self.session_summaries.get(session.id)
        if cached is not None:
            return cached
        messages = session.data.messages
        if not messages:
            summary = "（空会话）"
            self.session_summaries.put(session.id, summary)
            return summary
        compactor = ContextCompactor(
            config=config or self.loop_config(),
            preset=preset or await self.resolve_preset(),
            usage=usage,
        )
        try:
            summary = await compactor.summarize(messages, session.data.abstract)
        except Exception as exc:
            logger.warning(
                f"[Subconscious] 会话 {session.id} 摘要失败：{exc.__class__.__name__}: {exc}"
            )
            return "（摘要生成失败）"
        if not summary:
            return "（摘要为空）"
        self.session_summaries.put(session.id, summary)
        return summary

    # -- talking to the user --------------------------------------------------------------------

    async def compose_message(
        self,
        intent: str,
        memory_context: str,
        *,
        config: AmritaConfig | None,
        preset: ModelPreset | None,
        usage: Any,
    ) -> str:
        """Generate the message for the user with the send template and one LLM call."""
        try:
            system = self.templates.render(
                "prompt_send_file",
                {
                    "character_prompt": self.character_prompt(),
                    "intent": intent,
                    "memory_context": memory_context,
                    "current_time": _format_time(_now()),
                },
            )
        except PromptError as exc:
            logger.error(f"[Subconscious] {exc}")
            raise MessageComposeError(f"消息模板有误：{exc}") from None
        messages: CONTENT_LIST_TYPE = [
            Message(role="system", content=system),
            Message(role="user", content="请直接写出要发送给用户的消息正文。"),
        ]
        try:
            response = await get_last_response(
                call_completion(
                    messages,
                    preset=preset or await self.resolve_preset(),
                    config=config or self.loop_config(),
                    usage=usage,
                )
            )
        except Exception as exc:
            logger.warning(f"[Subconscious] 生成主动消息失败：{exc.__class__.__name__}: {exc}")
            raise MessageComposeError(f"生成消息失败：{exc.__class__.__name__}") from None
        text = (response.content or "").strip()
        if not text:
            raise MessageComposeError("模型没有生成消息内容")
        return text

    async def send_private(self, text: str) -> tuple[bool, str]:
        """Send ``text`` to the target user; ``(False, reason)`` when that is not possible."""
        if not self.target_user_id.isdigit():
            return False, "目标用户 ID 不是 QQ 号，无法私聊"
        import nonebot

        try:
            bot = nonebot.get_bot()
        except (ValueError, KeyError):
            return False, "Bot 当前未连接"
        try:
            await asyncio.wait_for(
                bot.call_api("send_private_msg", user_id=int(self.target_user_id), message=text),
                SEND_TIMEOUT_SECONDS,
            )
        except Exception as exc:
            logger.warning(f"[Subconscious] 主动消息发送失败：{exc.__class__.__name__}: {exc}")
            return False, f"发送失败：{exc.__class__.__name__}"
        logger.info(f"[Subconscious] Sent a message to user={self.target_user_id}")
        return True, ""

    # -- one cycle ----------------------------------------------------------------------------------

    async def _system_prompt(self, memory_count: int) -> str:
        """JINJA2_RENDER: the main template, the groups' sections and the compression hint."""
        now = _now()
        prompt = self.templates.render(
            "prompt_file",
            {
                "character_prompt": self.character_prompt() or "（未设置）",
                "last_run": self.format_last_run(),
                "last_abstracts": self.format_abstracts(),
                "current_time": _format_time(now),
                "target_user_id": self.target_user_id,
                "total_runs": self.state["total_runs"],
            },
        )
        sections = [prompt]
        for group in self.tool_groups:
            section = (await group.prompt_section()).strip()
            if section:
                sections.append(section)
        threshold = self.config.memory_warn_threshold
        if memory_count > threshold:
            sections.append(
                "## 注意：记忆过多，优先压缩\n"
                f"该用户的 L2 记忆已有 {memory_count} 条，超过了 {threshold} 条的提示阈值。"
                "本轮请优先压缩：合并重复或相近的记忆，删除过时或琐碎的条目，把零散的小事实归并成概括性的记忆。"
            )
        return "\n\n".join(sections)

    async def _user_input(self, cycle: Cycle, memory_count: int) -> str:
        """BUILD_MESSAGE: the cycle's input (the recent chat is appended by LIMIT_HISTORY)."""
        memo = await self.runtime.memo.get(self.target.user)
        memo_limit = self.runtime.memo.max_chars
        memo_note = "（已接近上限，请考虑把细节下放到 L2）" if len(memo) >= memo_limit * 0.8 else ""
        lines = [
            f"开始第 {cycle.number} 轮整理。",
            "<STATUS>",
            f"- L2 记忆：{memory_count} 条（单个分区上限 {self.runtime.tools.memory_limit} 条）",
            f"- L1 备忘录：{len(memo)}/{memo_limit} 字{memo_note}",
            f"- 待转达给用户的消息：{len(self.state['pending_messages'])} 条",
            "</STATUS>",
            "<MEMO>",
            html.escape(memo.strip(), quote=False) or "（空）",
            "</MEMO>",
            "请按系统提示整理，完成后调用 subconscious_iter_stop。",
        ]
        return "\n".join(lines)

    async def _chat_snapshot(self) -> MemoryModel:
        try:
            return await self.read_chat_memory()
        except Exception as exc:
            logger.warning(
                f"[Subconscious] 读取聊天记录失败，本轮不带聊天上下文：{exc.__class__.__name__}: {exc}"
            )
            return MemoryModel()

    async def run_cycle(self) -> CycleResult:
        """Run one cycle now (the planned job calls this too); never raises."""
        if not self.active:
            return CycleResult(0, "skipped", error="runner is shut down")
        if self._cycle_lock.locked():
            logger.info("[Subconscious] A cycle is already running; skipped")
            return CycleResult(0, "skipped", error="a cycle is already running")
        async with self._cycle_lock:
            self._idle.clear()
            try:
                return await self._run_cycle()
            finally:
                self.current_cycle = None
                self._chat = None
                self._idle.set()

    async def _run_cycle(self) -> CycleResult:
        started = time.monotonic()
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
        )
        self.current_cycle = cycle
        label = f"Cycle #{cycle.number}"
        logger.info(
            f"[Subconscious] {label} started for user={self.target_user_id} (penalty={self.penalty})"
        )

        try:
            memory_count = await self.runtime.store.count(self.target.user)
            system_prompt = await self._system_prompt(memory_count)
            user_input = await self._user_input(cycle, memory_count)
            preset = await self.resolve_preset()
            config = self.loop_config()
        except PromptError as exc:
            logger.error(f"[Subconscious] {label} aborted: {exc}")
            await self._end_cycle(cycle, "failed")
            return CycleResult(
                cycle.number, "failed", error=str(exc), seconds=time.monotonic() - started
            )
        except Exception as exc:
            logger.error(
                f"[Subconscious] {label} aborted before the agent started: {exc.__class__.__name__}: {exc}"
            )
            await self._end_cycle(cycle, "failed")
            return CycleResult(
                cycle.number, "failed", error=str(exc), seconds=time.monotonic() - started
            )

        tools = build_cycle_tools(self.tools, self.config.allowed_tools, warn=logger.warning)
        backend = SubconsciousBackend(tools, preset, await self._chat_snapshot())
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
        await self._add_usage(usage)
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
        await self._record(cycle, outcome, summary)
        await self._end_cycle(cycle, outcome)
        if outcome == "success":
            self.penalty = 0
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
            f"(tokens in/out {_tokens(usage)}, {cycle.describe_actions()}, penalty={self.penalty})"
            + (f": {result.error}" if result.error else "")
        )
        return result

    async def _end_cycle(self, cycle: Cycle, outcome: CycleOutcome) -> None:
        """Call ``on_cycle_end(cycle, outcome)`` of every tool group that has one.

        The extension point for groups that must commit or discard per-cycle
        work depending on how the cycle ended (see :class:`~.tools.ToolGroup`).
        A failing hook is logged and does not affect the others.
        """
        for group in self.tool_groups:
            hook = getattr(group, "on_cycle_end", None)
            if hook is None:
                continue
            try:
                await hook(cycle, outcome)
            except Exception as exc:
                logger.opt(exception=exc).error(
                    f"[Subconscious] Cycle #{cycle.number}: on_cycle_end of group {group.name} failed"
                )

    async def _record(self, cycle: Cycle, outcome: CycleOutcome, summary: str) -> None:
        """Post-processing: count the run and keep its abstract (window of ``max_abstracts``)."""
        entry: AbstractEntry = {
            "time": _now().isoformat(timespec="seconds"),
            "cycle": cycle.number,
            "outcome": outcome,
            "summary": summary,
        }

        def change(state: StateData) -> None:
            state["total_runs"] = max(state["total_runs"], cycle.number)
            state["last_abstracts"] = [*state["last_abstracts"], entry][
                -self.config.max_abstracts :
            ]

        try:
            await self.mutate_state(change)
        except Exception as exc:
            logger.error(f"[Subconscious] 保存循环状态失败：{exc.__class__.__name__}: {exc}")

    async def _add_usage(self, usage: UniResponseUsage[int] | None) -> None:
        """Add the run's total usage once to Amrita's global statistics."""
        if usage is None or (usage.prompt_tokens == 0 and usage.completion_tokens == 0):
            return
        try:
            from nonebot_plugin_amrita.database import InsightsModel
            from nonebot_plugin_amrita.memory import add_usage

            insights = await InsightsModel.get()
            add_usage(insights, usage)
            await insights.save()
        except Exception as exc:
            logger.warning(f"[Subconscious] 记录 token 用量失败：{exc.__class__.__name__}: {exc}")
