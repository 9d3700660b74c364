"""The stores of group awareness, built together from one configuration."""

from __future__ import annotations

from dataclasses import dataclass

from ...core.config import ConfigFile
from ..keys import user_of_key
from ..shared.coherence import Coherence, forgotten_of
from ..users.tombstones import ForgottenUsers
from .directory import GroupDirectory
from .persona_store import PersonaStore
from .self_store import SelfMemoryStore
from .window_store import GroupWindowStore

__all__ = ["GroupStores"]


def _keep_data() -> None:
    """A failed poll or a whole-store row: windows are data, not a cache (kept)."""


@dataclass(slots=True)
class GroupStores:
    """Windows, per-group facts, personas and the self memory of one process."""

    windows: GroupWindowStore
    directory: GroupDirectory
    personas: PersonaStore
    self_memory: SelfMemoryStore

    @classmethod
    def build(
        cls,
        config: ConfigFile,
        coherence: Coherence | None = None,
        forgotten: ForgottenUsers | None = None,
    ) -> GroupStores:
        """The stores; ``coherence`` (remote mode) keeps the persona cache, the groups'
        anonymisation switches and the self memory coherent with other processes'
        (``PersonaStore.share``, ``GroupDirectory.share``, ``SelfMemoryStore.share``);
        ``forgotten``: the tombstones the windows honour (no stored message of a member
        from before their forget). Every store's statements are waited for with the bound of
        ``coherence.work``, the process's one :class:`~..shared.sessions.SharedWork`."""
        work = coherence.work if coherence is not None else None
        stores = cls(
            windows=GroupWindowStore(config.group_context, forgotten, work),
            directory=GroupDirectory(config.group_context, work=work),
            personas=PersonaStore(work=work),
            self_memory=SelfMemoryStore(config.self_memory.max_chars, work=work),
        )
        if coherence is not None and coherence.active:
            stores.personas.share(coherence)
            stores.directory.share(coherence)  # the anonymisation switches
            stores.self_memory.share(coherence)
            coherence.follow_with(stores._forgotten_elsewhere, _keep_data)
        return stores

    def _forgotten_elsewhere(self, row: str) -> None:
        """A forget through another process: the user's messages leave this process's
        windows (stored rows are that process's work) and their cached labels go."""
        partition = forgotten_of(row)
        user_id = user_of_key(partition) if partition is not None else None
        if user_id is not None:
            self.windows.drop_user(user_id)
            self.directory.drop_user(user_id)

    def configure(self, config: ConfigFile) -> None:
        """Apply another configuration to the live stores (their data stays)."""
        self.windows.config = config.group_context
        self.directory.config = config.group_context
        self.self_memory.max_chars = config.self_memory.max_chars
