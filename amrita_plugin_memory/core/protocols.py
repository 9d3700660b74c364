"""Interfaces that let lower layers use services implemented higher up."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

__all__ = ["Embedder"]


class Embedder(Protocol):
    """Turns texts into vectors (implemented by :class:`~..embedding.client.EmbeddingClient`).

    The storage layer only needs this, so it never imports the embedding layer.
    """

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...
