"""The embedding fingerprint: which model the stored vectors come from.

Vectors are only comparable when they come from the same embedding model. The
memory collection therefore records, in its metadata, a fingerprint of the
embedding configuration::

    fingerprint = sha256(protocol | model | base_url)                 # raw text
    fingerprint = sha256(protocol | model | base_url | text_format)   # prefixes set

(``model`` is the resolved name when ``EMBEDDING_MODEL_NAME=auto``;
``base_url`` is normalised by :func:`normalize_base_url`, so the spellings of
one server's address give one fingerprint; ``EMBEDDING_PROCTOL=local`` records
``local`` as its address). ``text_format`` (:func:`text_format`) records the
instruction prefixes and ``input_type``: the same model fed other prefixes
gives another vector space. It is left out when empty, so fingerprints stored
before prefixes existed still match a configuration without them. The fingerprint travels with the
collection, so it also works with a remote ChromaDB.

Once a fingerprint is stored, ``auto`` keeps meaning the model recorded in it
(:func:`pin_auto_model`): pulling another embedding model into the service
later must not silently change the vector space.

The published ``amrita-plugin-memory`` records the same three parts under other keys
(:data:`PUBLISHED_FINGERPRINT_KEYS`, the URL as written, never prefixes). Where this
plugin's keys are missing they are read (:attr:`FingerprintInfo.published`): the same
model on the same service needs no re-embedding when a bot switches over. They are kept
only while they still describe the stored vectors (a switch back trusts them): every
re-embedding drops them (``maintenance.user_meta``), and so does :func:`write_fingerprint`
of another model.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ..storage.memory_store import MemoryStore
from .client import EmbeddingClient
from .local_model import LOCAL_BASE_URL

__all__ = [
    "FINGERPRINT_KEYS",
    "PUBLISHED_FINGERPRINT_KEYS",
    "FingerprintInfo",
    "compute_fingerprint",
    "current_fingerprint",
    "normalize_base_url",
    "pin_auto_model",
    "pinned_model",
    "stored_fingerprint",
    "text_format",
    "write_fingerprint",
]

# Collection metadata keys (memory collection; also written on the knowledge one).
META_FINGERPRINT = "embedding_fingerprint"
META_PROTOCOL = "embedding_protocol"
META_MODEL = "embedding_model"
META_BASE_URL = "embedding_base_url"
META_TEXT_FORMAT = "embedding_text_format"
FINGERPRINT_KEYS = (META_FINGERPRINT, META_PROTOCOL, META_MODEL, META_BASE_URL, META_TEXT_FORMAT)
PUBLISHED_FINGERPRINT_KEYS = (
    "embed_fingerprint",
    "embed_protocol",
    "embed_model",
    "embed_base_url",
)
"""The published plugin's keys for the same parts (digest, protocol, model, URL as written)."""


_DEFAULT_PORTS = {"http": 80, "https": 443}


def normalize_base_url(protocol: str, url: str) -> str:
    """One spelling per server: what the fingerprint records.

    Lower-case scheme and host, default ports dropped, no user info, query or
    fragment, and the path without trailing ``/`` and without the API suffix
    the client adds by itself (``/v1``; for Ollama also ``/api``). So
    ``http://Host:80/v1/`` and ``http://host`` are the same server; a
    different port or path prefix (a proxy) stays different.
    """
    if protocol == "local":
        return LOCAL_BASE_URL  # in-process: no server
    text = url.strip()
    parts = urlsplit(text if "://" in text else "http://" + text)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:  # not a number: keep what was written
        return text.rstrip("/")
    netloc = host if port is None or port == _DEFAULT_PORTS.get(scheme) else f"{host}:{port}"
    path = parts.path.rstrip("/")
    suffixes = ("/v1", "/api") if protocol == "ollama-embed" else ("/v1",)
    for suffix in suffixes:
        if path.lower().endswith(suffix):
            path = path[: -len(suffix)].rstrip("/")
            break
    return f"{scheme}://{netloc}{path}"


def compute_fingerprint(protocol: str, model: str, base_url: str, text_format: str = "") -> str:
    """``sha256(protocol | model | base_url [| text_format])`` as hex."""
    tail = f"|{text_format}" if text_format else ""
    return hashlib.sha256(f"{protocol}|{model}|{base_url}{tail}".encode()).hexdigest()


def text_format(embedder: EmbeddingClient) -> str:
    """How texts are presented to the model (prefixes, ``input_type``); ``""`` for raw text."""
    if not (embedder.query_prefix or embedder.document_prefix or embedder.input_type != "none"):
        return ""
    fields = [embedder.query_prefix, embedder.document_prefix, embedder.input_type]
    return json.dumps(fields, ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class FingerprintInfo:
    """A fingerprint with the human-readable parts it was computed from."""

    fingerprint: str
    protocol: str = ""
    model: str = ""
    base_url: str = ""
    text_format: str = ""
    published: bool = False
    """Read from the published plugin's keys (:data:`PUBLISHED_FINGERPRINT_KEYS`)."""

    @classmethod
    def of(cls, protocol: str, model: str, base_url: str, text_format: str = "") -> FingerprintInfo:
        digest = compute_fingerprint(protocol, model, base_url, text_format)
        return cls(digest, protocol, model, base_url, text_format)

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> FingerprintInfo | None:
        """This plugin's fingerprint in collection metadata, else the published plugin's."""
        digest = meta.get(META_FINGERPRINT)
        if not isinstance(digest, str) or not digest:
            return cls.from_published(meta)
        return cls(
            digest,
            str(meta.get(META_PROTOCOL, "")),
            str(meta.get(META_MODEL, "")),
            str(meta.get(META_BASE_URL, "")),
            str(meta.get(META_TEXT_FORMAT, "")),
        )

    @classmethod
    def from_published(cls, meta: Mapping[str, Any]) -> FingerprintInfo | None:
        """The fingerprint the published plugin recorded (raw text, no prefixes), if any."""
        digest, protocol, model, url = (meta.get(k) for k in PUBLISHED_FINGERPRINT_KEYS)
        if not isinstance(digest, str) or not digest:
            return None
        return cls(digest, str(protocol or ""), str(model or ""), str(url or ""), published=True)

    def as_meta(self) -> dict[str, str]:
        return {
            META_FINGERPRINT: self.fingerprint,
            META_PROTOCOL: self.protocol,
            META_MODEL: self.model,
            META_BASE_URL: self.base_url,
            META_TEXT_FORMAT: self.text_format,
        }

    def to_json(self) -> str:
        return json.dumps(
            {
                "fingerprint": self.fingerprint,
                "protocol": self.protocol,
                "model": self.model,
                "base_url": self.base_url,
                "text_format": self.text_format,
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
            str(data.get("text_format", "")),
        )

    def same_service(self, other: FingerprintInfo) -> bool:
        """Same protocol, model and (normalised) server: the same vector space.

        True for a fingerprint written from another spelling of the URL (by an
        older plugin that did not normalise it), where the hashes differ.
        """
        return (
            bool(self.protocol and self.model)
            and (self.protocol, self.model, self.text_format)
            == (other.protocol, other.model, other.text_format)
            and normalize_base_url(self.protocol, self.base_url)
            == normalize_base_url(other.protocol, other.base_url)
        )

    def describe(self) -> str:
        by = "（已发布的 amrita-plugin-memory 记录）" if self.published else ""
        if not (self.protocol or self.model or self.base_url):
            return self.fingerprint[:16] + by
        fmt = f"，文本格式 {self.text_format}" if self.text_format else ""
        return (
            f"{self.protocol} / {self.model} @ {self.base_url}{fmt}（{self.fingerprint[:16]}）{by}"
        )


async def current_fingerprint(embedder: EmbeddingClient, *, probe: bool = False) -> FingerprintInfo:
    """The fingerprint of the current configuration.

    Needs the embedding service only when ``EMBEDDING_MODEL_NAME=auto`` is not
    pinned yet (the model name is resolved through the service's model list);
    raises :class:`~..core.errors.EmbeddingError` when it is unreachable then.
    ``probe``: a short deadline without retries (start-up check, ``status``).
    """
    model = await embedder.resolve_model(probe=probe)
    url = normalize_base_url(embedder.protocol, embedder.base_url)
    return FingerprintInfo.of(embedder.protocol, model, url, text_format(embedder))


async def pinned_model(store: MemoryStore, embedder: EmbeddingClient) -> str | None:
    """The model of the stored fingerprint, if it was made for this protocol and server.

    Read-only (never creates the collection); raises
    :class:`~..core.errors.VectorStoreError` when Chroma is unreachable, so
    that ``auto`` is not resolved from the model list by mistake meanwhile.
    """
    col = await store.connection.get_collection(store.name, create=False)
    stored = FingerprintInfo.from_meta(col.metadata or {}) if col is not None else None
    if stored is None or not stored.model or stored.protocol != embedder.protocol:
        return None
    here = normalize_base_url(embedder.protocol, embedder.base_url)
    if normalize_base_url(stored.protocol, stored.base_url) != here:
        return None  # another server: resolve (and compare fingerprints) as usual
    return stored.model


def pin_auto_model(embedder: EmbeddingClient, store: MemoryStore) -> None:
    """Make ``EMBEDDING_MODEL_NAME=auto`` resolve to the model of ``store``'s fingerprint.

    Without it, ``auto`` takes the first embedding model the service lists,
    which changes when another model is pulled into Ollama. Explicit model
    names are unaffected.
    """
    if embedder.configured_model == "auto":
        embedder.pin_source = functools.partial(pinned_model, store, embedder)


async def stored_fingerprint(store: MemoryStore) -> FingerprintInfo | None:
    """The fingerprint recorded in the memory collection, if any."""
    return FingerprintInfo.from_meta(await store.get_metadata())


async def write_fingerprint(store: MemoryStore, info: FingerprintInfo) -> None:
    """Record ``info``; the published plugin's keys go unless they describe the same vectors."""
    published = FingerprintInfo.from_published(await store.get_metadata())
    stale = published is not None and not (
        published.fingerprint == info.fingerprint or published.same_service(info)
    )
    await store.set_meta(info.as_meta(), drop=PUBLISHED_FINGERPRINT_KEYS if stale else ())
