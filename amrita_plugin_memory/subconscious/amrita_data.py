"""Everything the loop reads from (or adds to) Amrita: chat history, sessions, presets, usage.

One class, so that the loop's dependence on the host framework's data is in
one place and a framework change breaks here first.

**After a forget of the target user** the loop reads nothing of Amrita's chat
history from before it (:func:`after_forget`): the history is Amrita's and the
forget leaves it (the user clears it with ``/session forget`` / ``/session clear``),
but the loop must not rebuild the forgotten memories from it. Amrita keeps no
time per message, only per context: an archived session has the time it was
archived (``created_at``), and the current context is emptied each time Amrita
archives it. So, with ``at`` the time of the forget (the tombstone,
``storage.users.tombstones.ForgottenUsers``):

* a session archived no later than ``at`` is older: left out;
* the first session archived after ``at`` is the context that was current at
  the forget, and may begin before it: left out too;
* the current context is read only when some session was archived after ``at``
  (then it began after the forget); otherwise it may hold older messages, and
  the loop works without it (and without its summary) until Amrita next
  archives it.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from amrita_core import MemoryModel, ModelPreset, UniResponseUsage
from amrita_core.components.compaction import ContextCompactor
from amrita_core.config import AmritaConfig
from nonebot import logger
from nonebot_plugin_amrita.cache import LRUCache

from ..core.config import SubconsciousConfig
from .consts import SESSION_SUMMARY_CACHE_SIZE

if TYPE_CHECKING:
    from nonebot_plugin_amrita.memory import MemorySessionsSchema

__all__ = ["AmritaData", "after_forget"]

S = TypeVar("S")
ForgottenAt = Callable[[], Awaitable[datetime | None]]
"""When the target user was last forgotten (``None``: never)."""


def after_forget(
    sessions: Sequence[S], created_at: Callable[[S], float], at: float
) -> tuple[list[S], bool]:
    """``(the archived sessions that began after the forget at ``at``, whether the
    current context began after it)`` (see the module docstring)."""
    later = sorted((s for s in sessions if created_at(s) > at), key=created_at)
    return later[1:], bool(later)


async def _no_forget() -> datetime | None:
    return None


class AmritaData:
    """Amrita's data about one user (their private chat), and the chat plugin's settings."""

    def __init__(
        self, config: SubconsciousConfig, user_key: str, *, forgotten_at: ForgottenAt = _no_forget
    ) -> None:
        self.config = config
        self.user_key = user_key
        """The target user's private uni_id (where Amrita keeps their chat)."""
        self.forgotten_at = forgotten_at
        self.session_summaries: LRUCache[int, str] = LRUCache(SESSION_SUMMARY_CACHE_SIZE)

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

    async def _stored_sessions(self) -> list[MemorySessionsSchema]:
        from nonebot_plugin_amrita.memory import CachedUserDataRepository

        return list(await CachedUserDataRepository().get_sesssions(self.user_key))

    async def _forget_time(self) -> float | None:
        at = await self.forgotten_at()
        return at.timestamp() if at is not None else None

    async def read_chat_memory(self) -> MemoryModel:
        """A copy of the target user's stored private chat (Amrita's memory); empty
        while it may hold messages from before a forget of the user."""
        from nonebot_plugin_amrita.memory import CachedUserDataRepository

        at = await self._forget_time()
        if at is not None:
            _, current = after_forget(await self._stored_sessions(), _created, at)
            if not current:
                return MemoryModel()
        stored = (await CachedUserDataRepository().get_memory(self.user_key)).memory_json
        return MemoryModel(messages=copy.deepcopy(stored.messages), abstract=stored.abstract)

    async def chat_snapshot(self) -> MemoryModel:
        """:meth:`read_chat_memory`, or an empty history (logged) when it cannot be read."""
        try:
            return await self.read_chat_memory()
        except Exception as exc:
            logger.warning(
                f"[Subconscious] 读取聊天记录失败，本轮不带聊天上下文：{exc.__class__.__name__}: {exc}"
            )
            return MemoryModel()

    async def read_archived_sessions(self) -> list[MemorySessionsSchema]:
        """The user's archived sessions, without those from before a forget of the user."""
        sessions = await self._stored_sessions()
        at = await self._forget_time()
        return sessions if at is None else after_forget(sessions, _created, at)[0]

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

    async def add_usage(self, usage: UniResponseUsage[int] | None) -> None:
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


def _created(session: MemorySessionsSchema) -> float:
    return session.created_at
