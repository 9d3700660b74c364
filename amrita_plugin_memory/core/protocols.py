"""Interfaces that let lower layers use services implemented higher up."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Literal, Protocol

__all__ = ["Embedder", "Fence", "TextKind"]

Fence = Callable[[], Awaitable[None]]
"""Called by a store right before it writes, under the partition's lock: raises
:class:`~.errors.WriteFenced` when the work that asked for the write was voided
(its user forgotten or opted out since the work took its input)."""

TextKind = Literal["query", "document"]
"""What is embedded: a search query, or a text to store (their prefixes differ)."""


class Embedder(Protocol):
    """Turns texts into vectors (implemented by :class:`~..embedding.client.EmbeddingClient`).

    The storage layer only needs this, so it never imports the embedding layer.
    ``kind`` tells queries from stored texts (instruction prefixes, ``input_type``).
    """

    async def embed(
        self, texts: Sequence[str], kind: TextKind = "document"
    ) -> list[list[float]]: ...
