"""The runtime: the objects that own the plugin's state, created once per process."""

from __future__ import annotations

from .config import PluginConfig
from .embed import EmbeddingClient
from .vector import MEMORY_COLLECTION, ChromaConnection, MemoryStore

__all__ = ["MemoryRuntime"]


class MemoryRuntime:
    """Owns the embedding client, the Chroma connection and the memory store.

    Everything that talks to the outside world hangs off this one object, so
    there is exactly one HTTP session and one Chroma client per process, and
    one place (:meth:`close`) that releases them on shutdown.
    """

    def __init__(self, config: PluginConfig) -> None:
        self.config = config
        self.embedder = EmbeddingClient.from_env(config.env)
        self.connection = ChromaConnection(config.env, config.chroma_dir)
        self.store = MemoryStore(self.connection, self.embedder, MEMORY_COLLECTION)

    async def close(self) -> None:
        await self.embedder.close()
        self.connection.close()
