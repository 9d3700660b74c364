"""The console of one bot process: every operation the admin API offers, in one object."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ..services import MemoryRuntime
from ..storage.groups.stores import GroupStores
from ..storage.usage import usage_report
from ..subconscious.profile_store import ProfileStore
from ..subconscious.runner import SubconsciousRunner
from ..upkeep.users.user_data import UserData
from .archive import ArchiveAdmin
from .catalog import PartitionCatalog
from .dates import local_stamps
from .errors import guarded
from .groups import GroupAdmin
from .importing import ImportAdmin
from .jobs import MaintenanceJobs
from .knowledge import KnowledgeAdmin, ProfileAdmin
from .memories import MemoryAdmin
from .memos import MemoAdmin
from .status import StatusCache, group_awareness_json, l3_json
from .timeline import TimelineAdmin
from .users import UserAdmin

__all__ = ["ConsoleService"]


class ConsoleService:
    """Built once by the plugin from its runtime, (when the L3 loop runs) its runner,
    the stores of group awareness and a user's export and forget (``user_data``).

    ``publish`` sends a message to the WebUI's WebSocket channel of the
    plugin (progress of long operations); ``None`` when there is no WebUI.
    What it sends and every answer of the admin API (:meth:`shown`) carry their
    stamps in the owner's zone (:mod:`.dates`).
    """

    def __init__(
        self,
        runtime: MemoryRuntime,
        runner: SubconsciousRunner | None = None,
        groups: GroupStores | None = None,
        user_data: UserData | None = None,
        *,
        publish: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
    ) -> None:
        self.runtime = runtime
        self.calendar = runtime.calendar
        """The owner's calendar (the runtime's): the zone of every stamp the console sends."""
        self.runner = runner
        self.catalog = PartitionCatalog(runtime.store)
        self.status_cache = StatusCache(runtime.maintenance)
        self.catalog.listeners.append(self.status_cache.invalidate)
        self.memories = MemoryAdmin(runtime.store, self.catalog)
        self.memos = MemoAdmin(runtime.memo)
        self.archive = ArchiveAdmin(
            runtime.store,
            runtime.config.file,
            self.catalog,
            calendar=self.calendar,
            episodes=runtime.episodes,
        )
        self.knowledge = KnowledgeAdmin(runner.knowledge if runner is not None else None)
        profile = (
            runner.profile
            if runner is not None
            else ProfileStore.of(
                runtime.config.data_dir,
                runtime.store.coherence,
                runtime.config.file.subconscious.target_user_id,
                runtime.forgotten.forgotten_at,
            )
        )
        self.profile = ProfileAdmin(
            profile, target=runner.target_user_id if runner is not None else None
        )
        self.groups = GroupAdmin(groups, runtime.config.file.persona)
        self.users = UserAdmin(user_data, self.catalog)
        self.imports = ImportAdmin(runtime, self.catalog)
        self.timeline = TimelineAdmin(runtime.store, runtime.episodes, self.calendar)
        if user_data is not None:  # a forget from the chat or the command line too
            user_data.after_forget.append(lambda _user_id: self.catalog.invalidate())
        self.jobs = MaintenanceJobs(
            runtime.maintenance,
            self.catalog,
            knowledge=runner.knowledge if runner is not None else None,
            publish=self._local(publish) if publish is not None else None,
        )

    def shown(self, data: Any) -> Any:
        """``data`` as the page is sent it: its stamps in the owner's zone."""
        return local_stamps(data, self.calendar)

    def _local(
        self, publish: Callable[[dict[str, Any]], Awaitable[None]]
    ) -> Callable[[dict[str, Any]], Awaitable[None]]:
        async def send(message: dict[str, Any]) -> None:
            await publish(self.shown(message))

        return send

    async def status(self, query: Mapping[str, Any]) -> dict[str, Any]:
        """The overview; ``fresh=1`` recomputes the store report now."""
        fresh = str(query.get("fresh", "")).strip().lower() in ("1", "true", "yes")
        store = await guarded("console_status", lambda: self.status_cache.get(fresh=fresh))
        file = self.runtime.config.file
        return {
            **store,
            "subconscious": l3_json(self.runner, file),
            "group_awareness": {**group_awareness_json(file), **await self.groups.counts()},
            "job": self.jobs.current(),
            "maintenance": self.jobs.busy,
            "memory_limit": file.per_session_memory_limit,
            "memo_max_chars": file.memo_max_chars,
            "usage": await usage_report(self.runtime.budget),
        }
