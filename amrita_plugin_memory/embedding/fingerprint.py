"""The embedding fingerprint: which model the stored vectors come from.

Vectors are only comparable when they come from the same embedding model. The
memory collection therefore records, in its metadata, a fingerprint of the
embedding configuration::

    fingerprint = sha256(protocol | model | base_url)

(``model`` is the resolved name when ``EMBEDDING_MODEL_NAME=auto``). The
fingerprint travels with the collection, so it also works with a remote
ChromaDB.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..storage.memory_store import MemoryStore
from .client import EmbeddingClient

__all__ = [
    "FINGERPRINT_KEYS",
    "FingerprintInfo",
    "compute_fingerprint",
    "current_fingerprint",
    "stored_fingerprint",
    "write_fingerprint",
]

# Collection metadata keys (memory collection; also written on the knowledge one).
META_FINGERPRINT = "embedding_fingerprint"
META_PROTOCOL = "embedding_protocol"
META_MODEL = "embedding_model"
META_BASE_URL = "embedding_base_url"
FINGERPRINT_KEYS = (META_FINGERPRINT, META_PROTOCOL, META_MODEL, META_BASE_URL)


def compute_fingerprint(protocol: str, model: str, base_url: str) -> str:
    """``sha256(protocol | model | base_url)`` as hex."""
    return hashlib.sha256(f"{protocol}|{model}|{base_url}".encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class FingerprintInfo:
    """A fingerprint with the human-readable parts it was computed from."""

    fingerprint: str
    protocol: str = ""
    model: str = ""
    base_url: str = ""

    @classmethod
    def of(cls, protocol: str, model: str, base_url: str) -> FingerprintInfo:
        return cls(compute_fingerprint(protocol, model, base_url), protocol, model, base_url)

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> FingerprintInfo | None:
        digest = meta.get(META_FINGERPRINT)
        if not isinstance(digest, str) or not digest:
            return None
        return cls(
            digest,
            str(meta.get(META_PROTOCOL, "")),
            str(meta.get(META_MODEL, "")),
            str(meta.get(META_BASE_URL, "")),
        )

    def as_meta(self) -> dict[str, str]:
        return {
            META_FINGERPRINT: self.fingerprint,
            META_PROTOCOL: self.protocol,
            META_MODEL: self.model,
            META_BASE_URL: self.base_url,
        }

    def to_json(self) -> str:
        return json.dumps(
            {
                "fingerprint": self.fingerprint,
                "protocol": self.protocol,
                "model": self.model,
                "base_url": self.base_url,
            },
            ensure_ascii=False,
        )

    @classmethod
    def from_json(cls, text: Any) -> FingerprintInfo | None:
        try:
            data = json.loads(text) if isinstance(text, str) else None
        except ValueError:
            return None
        if not isinstance(data, dict) or not isinstance(data.get("fingerprint"), str):
            return None
        return cls(
            data["fingerprint"],
            str(data.get("protocol", "")),
            str(data.get("model", "")),
            str(data.get("base_url", "")),
        )

    def describe(self) -> str:
        if not (self.protocol or self.model or self.base_url):
            return self.fingerprint[:16]
        return f"{self.protocol} / {self.model} @ {self.base_url}（{self.fingerprint[:16]}）"


async def current_fingerprint(embedder: EmbeddingClient) -> FingerprintInfo:
    """The fingerprint of the current configuration.

    Needs the embedding service only when ``EMBEDDING_MODEL_NAME=auto`` (the
    model name is resolved through the service's model list); raises
    :class:`~..core.errors.EmbeddingError` when it is unreachable then.
    """
    model = await embedder.resolve_model()
    return FingerprintInfo.of(embedder.protocol, model, embedder.base_url)


async def stored_fingerprint(store: MemoryStore) -> FingerprintInfo | None:
    """The fingerprint recorded in the memory collection, if any."""
    return FingerprintInfo.from_meta(await store.get_metadata())


async def write_fingerprint(store: MemoryStore, info: FingerprintInfo) -> None:
    await store.set_meta(info.as_meta())
