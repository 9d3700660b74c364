"""Conversation episodes of one process: what the hooks, the forget and the bot's
start-up and shutdown call (issue #48).

* :attr:`EpisodeService.recorder` — the chat's lines, buffered (:mod:`.recorder`);
* :meth:`EpisodeService.run_once` — one pass of the background loop: the buffer
  flushed, then every ended conversation kept as an episode (:mod:`.closer`);
* :meth:`EpisodeService.block` — a turn's ``<EPISODES>`` block (:mod:`.recall`);
* :meth:`EpisodeService.forget` — a user's waiting lines dropped here at once.

Everything reads the live ``[episodes]`` configuration: with ``enabled = false``
nothing is recorded, closed or recalled, and what is stored stays.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from nonebot import logger

from ..core.calendar import OwnerCalendar
from ..core.config_sections import EpisodesConfig
from ..groups.amrita_llm import Completion, complete_isolated
from ..services import MemoryRuntime
from ..storage.episodes.store import EpisodeStore
from ..storage.groups.directory import GroupDirectory
from ..storage.keys import ChatTarget, user_key
from ..storage.scope import View
from ..storage.users.fences import UserFences
from .closer import EpisodeCloser, Labeller, directory_labels, nickname_labels
from .recall import EpisodeRecall
from .recorder import Allows, EpisodeRecorder

__all__ = ["PASS_SECONDS", "EpisodeService"]

PASS_SECONDS = 10.0
"""How often the background loop flushes the lines and closes ended conversations."""


class EpisodeService:
    """The recorder, the closer and the recall of one process, on one configuration."""

    def __init__(
        self,
        store: EpisodeStore,
        calendar: OwnerCalendar,
        config: Callable[[], EpisodesConfig],
        fences: UserFences,
        *,
        complete: Completion | None = complete_isolated,
        allows: Allows | None = None,
        closer: EpisodeCloser | None = None,
        labels: Labeller = nickname_labels,
        clock: Callable[[], float] = time.time,
        pass_seconds: float = PASS_SECONDS,
    ) -> None:
        self.store = store
        self.config = config
        self.clock = clock
        self.pass_seconds = pass_seconds
        self.recorder = EpisodeRecorder(store, fences, allows)
        self.closer = closer or EpisodeCloser(store, calendar, config(), complete, labels=labels)
        self.recall = EpisodeRecall(store, calendar, config)
        self._task: asyncio.Task[None] | None = None
        self._pass = asyncio.Lock()

    @classmethod
    def build(
        cls,
        runtime: MemoryRuntime,
        *,
        directory: GroupDirectory | None = None,
        allows: Allows | None = None,
        complete: Completion | None = complete_isolated,
    ) -> EpisodeService:
        """The service on the runtime's store, calendar, fences, budget and leases."""

        def config() -> EpisodesConfig:
            return runtime.config.file.episodes

        labels = directory_labels(directory) if directory is not None else nickname_labels
        closer = EpisodeCloser(
            runtime.episodes,
            runtime.calendar,
            config(),
            complete,
            runtime.budget,
            labels=labels,
            leases=runtime.store.coherence.leases,
        )
        return cls(
            runtime.episodes,
            runtime.calendar,
            config,
            runtime.fences,
            allows=allows,
            closer=closer,
        )

    @property
    def enabled(self) -> bool:
        return self.config().enabled

    # -- the chat ---------------------------------------------------------------------------

    def heard(self, target: ChatTarget, name: str, text: str) -> None:
        if self.enabled:
            self.recorder.heard(target, name, text, self.clock())

    def replied(self, target: ChatTarget, bot_id: str, text: str) -> None:
        if self.enabled:
            self.recorder.replied(target, bot_id, text, self.clock())

    async def block(self, view: View, text: str) -> str:
        """The turn's ``<EPISODES>`` block (empty unless the message asks about past
        conversations). The lines heard so far are flushed first, so "上次" is measured
        from the conversation going on now."""
        if not self.enabled or self.recall.ask_of(text, self.clock()) is None:
            return ""
        await self.recorder.flush()
        return await self.recall.block(view, text, self.clock())

    def forget(self, user_id: str) -> int:
        """Drop ``user_id``'s lines waiting in this process (a forget, an opt-out)."""
        return self.recorder.forget(user_id, user_key(user_id))

    # -- the background loop -----------------------------------------------------------------

    async def run_once(self) -> int:
        """Flush the heard lines, then keep every ended conversation; how many episodes."""
        async with self._pass:
            self.closer.configure(self.config())
            await self.recorder.flush()
            if not self.enabled:
                return 0
            return await self.closer.run_once(self.clock())

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.pass_seconds)
            try:
                await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the next pass tries again; lines stay waiting
                logger.warning(f"[Memory] 对话片段处理失败：{exc.__class__.__name__}: {exc}")

    def start(self) -> None:
        """Start the background loop (once; on the bot's start-up)."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def close(self) -> None:
        """Stop the loop and write the lines still buffered (the shutdown)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        try:
            await self.recorder.flush()
        except Exception as exc:
            logger.warning(
                f"[Memory] 关闭时写入对话片段的消息失败：{exc.__class__.__name__}: {exc}"
            )
