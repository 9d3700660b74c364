"""The runtime: the objects that own the plugin's state, created once per process."""

from __future__ import annotations

from .config import PluginConfig
from .embed import EmbeddingClient
from .memo import MemoService
from .tools import MemoryTools
from .vector import MEMORY_COLLECTION, ChromaConnection, MemoryStore

__all__ = ["MemoryRuntime"]


class MemoryRuntime:
    """Owns the embedding client, the Chroma connection, the stores and the tool logic.

    Everything that talks to the outside world hangs off this one object, so
    there is exactly one HTTP session and one Chroma client per process, and
    one place (:meth:`close`) that releases them on shutdown.
    """

    def __init__(self, config: PluginConfig) -> None:
        self.config = config
        self.embedder = EmbeddingClient.from_env(config.env)
        self.connection = ChromaConnection(config.env, config.chroma_dir)
        self.store = MemoryStore(self.connection, self.embedder, MEMORY_COLLECTION)
        self.memo = MemoService(config.file.memo_max_chars)
        self.tools = MemoryTools(
            self.store, self.memo, memory_limit=config.file.per_session_memory_limit
        )

    async def close(self) -> None:
        await self.embedder.close()
        self.connection.close()
