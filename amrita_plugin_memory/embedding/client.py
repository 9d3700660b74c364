"""Async embedding client for Ollama (``/api/embed``) and OpenAI (``/v1/embeddings``).

One :class:`EmbeddingClient` per process owns one ``aiohttp`` session. It
batches inputs, applies a timeout to every request, retries connection errors
and 5xx answers a bounded number of times with exponential backoff, and
checks that the service returned one vector per input, all of one dimension.
Failures surface as :class:`EmbeddingError` subclasses whose messages can be
shown to an operator or returned to the LLM as a tool error.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import Any, Literal

import aiohttp

from ..core.config import EnvConfig
from ..core.errors import (
    EmbeddingHTTPError,
    EmbeddingResponseError,
    EmbeddingUnavailable,
)

__all__ = ["EmbeddingClient"]

Protocol = Literal["openai", "ollama-embed"]


def _detail(body: Any, fallback: str) -> str:
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict):
            return str(err.get("message") or err)
        if err:
            return str(err)
    return fallback[:300]


class EmbeddingClient:
    """Embeds texts with the configured service.

    ``model="auto"`` is resolved once through the service's model list
    (:meth:`resolve_model`); the resolved name is what the fingerprint uses.
    """

    def __init__(
        self,
        *,
        protocol: Protocol,
        base_url: str,
        model: str,
        api_key: str = "",
        timeout: float = 30.0,
        max_retries: int = 2,
        batch_size: int = 64,
        backoff: float = 0.5,
    ) -> None:
        if protocol not in ("openai", "ollama-embed"):
            raise ValueError(f"unknown embedding protocol {protocol!r}")
        self.protocol: Protocol = protocol
        self.base_url = base_url.rstrip("/")
        self.configured_model = model.strip() or "auto"
        self.api_key = api_key
        self.timeout = timeout
        self.max_retries = max(0, max_retries)
        self.batch_size = max(1, batch_size)
        self.backoff = backoff
        self._resolved: str | None = (
            None if self.configured_model == "auto" else self.configured_model
        )
        self._session: aiohttp.ClientSession | None = None
        self._resolve_lock = asyncio.Lock()

    @classmethod
    def from_env(cls, env: EnvConfig) -> EmbeddingClient:
        """The client described by the ``EMBEDDING_*`` settings."""
        return cls(
            protocol=env.embedding_proctol,
            base_url=env.embedding_model_url,
            model=env.embedding_model_name,
            api_key=env.embedding_model_api_key,
            timeout=env.embedding_timeout_seconds,
            batch_size=env.reembed_batch_size,
        )

    # -- lifecycle -------------------------------------------------------

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            headers = {"Content-Type": "application/json"}
            if self.api_key:
                headers["Authorization"] = f"Bearer {self.api_key}"
            self._session = aiohttp.ClientSession(headers=headers)
        return self._session

    async def close(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None

    # -- URLs --------------------------------------------------------------

    def _openai_base(self) -> str:
        # Accept both "http://host:port" and "http://host:port/v1".
        return self.base_url if self.base_url.endswith("/v1") else self.base_url + "/v1"

    def _ollama_base(self) -> str:
        base = self.base_url
        for suffix in ("/api", "/v1"):
            if base.endswith(suffix):
                base = base[: -len(suffix)]
        return base

    # -- HTTP core -----------------------------------------------------------

    async def _request(self, method: str, url: str, payload: dict[str, Any] | None) -> Any:
        """One request with timeout and bounded retries on transient failures."""
        attempt = 0
        while True:
            try:
                session = self._get_session()
                timeout = aiohttp.ClientTimeout(total=self.timeout)
                async with session.request(method, url, json=payload, timeout=timeout) as resp:
                    text = await resp.text()
                    try:
                        body = await resp.json(content_type=None) if text else None
                    except ValueError:
                        body = None
                    if resp.status >= 400:
                        error = EmbeddingHTTPError(resp.status, _detail(body, text))
                        if resp.status < 500 or attempt >= self.max_retries:
                            raise error
                    elif body is None:
                        raise EmbeddingResponseError(f"嵌入服务返回了非 JSON 内容：{text[:200]!r}")
                    else:
                        return body
            except (TimeoutError, aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
                if attempt >= self.max_retries:
                    kind = "超时" if isinstance(exc, TimeoutError) else "无法连接"
                    raise EmbeddingUnavailable(
                        f"嵌入服务{kind}（{url}，已重试 {attempt} 次）：{exc.__class__.__name__}"
                        f"{': ' + str(exc) if str(exc) else ''}"
                    ) from exc
            attempt += 1
            await asyncio.sleep(self.backoff * (2 ** (attempt - 1)))

    # -- model resolution ----------------------------------------------------

    async def list_models(self) -> list[str]:
        if self.protocol == "openai":
            body = await self._request("GET", self._openai_base() + "/models", None)
            items = body.get("data") if isinstance(body, dict) else None
            return [str(m["id"]) for m in items or [] if isinstance(m, dict) and "id" in m]
        body = await self._request("GET", self._ollama_base() + "/api/tags", None)
        items = body.get("models") if isinstance(body, dict) else None
        names: list[str] = []
        for m in items or []:
            if isinstance(m, dict) and (m.get("name") or m.get("model")):
                names.append(str(m.get("name") or m.get("model")))
        return names

    async def _pick_embedding_model(self) -> str:
        if self.protocol == "ollama-embed":
            body = await self._request("GET", self._ollama_base() + "/api/tags", None)
            candidates = []
            for m in (body or {}).get("models") or []:
                if not isinstance(m, dict):
                    continue
                name = str(m.get("name") or m.get("model") or "")
                details = m.get("details") or {}
                families = [str(details.get("family", ""))] + [
                    str(f) for f in details.get("families") or []
                ]
                if "embed" in name.lower() or any("bert" in f.lower() for f in families):
                    candidates.append(name)
        else:
            candidates = [n for n in await self.list_models() if "embed" in n.lower()]
        if not candidates:
            raise EmbeddingResponseError(
                "EMBEDDING_MODEL_NAME=auto，但嵌入服务没有列出任何嵌入模型；请显式设置 EMBEDDING_MODEL_NAME"
            )
        return candidates[0]

    async def resolve_model(self) -> str:
        """The model name actually used (resolving ``auto`` once)."""
        if self._resolved is not None:
            return self._resolved
        async with self._resolve_lock:
            if self._resolved is None:
                self._resolved = await self._pick_embedding_model()
        return self._resolved

    @property
    def resolved_model(self) -> str | None:
        return self._resolved

    # -- embedding -------------------------------------------------------------

    async def _embed_batch(self, model: str, texts: list[str]) -> list[list[float]]:
        if self.protocol == "openai":
            body = await self._request(
                "POST",
                self._openai_base() + "/embeddings",
                {"model": model, "input": texts, "encoding_format": "float"},
            )
            data = body.get("data") if isinstance(body, dict) else None
            if not isinstance(data, list):
                raise EmbeddingResponseError("嵌入服务的响应缺少 data 字段")
            ordered = sorted(data, key=lambda d: d.get("index", 0) if isinstance(d, dict) else 0)
            vectors = [d.get("embedding") if isinstance(d, dict) else None for d in ordered]
        else:
            body = await self._request(
                "POST", self._ollama_base() + "/api/embed", {"model": model, "input": texts}
            )
            vectors = body.get("embeddings") if isinstance(body, dict) else None
            if not isinstance(vectors, list):
                raise EmbeddingResponseError("嵌入服务的响应缺少 embeddings 字段")
        if len(vectors) != len(texts):
            raise EmbeddingResponseError(
                f"嵌入服务返回的向量数量不符：请求 {len(texts)} 条，返回 {len(vectors)} 条"
            )
        return [self._check_vector(v) for v in vectors]

    @staticmethod
    def _check_vector(vector: Any) -> list[float]:
        if not isinstance(vector, list) or not vector:
            raise EmbeddingResponseError("嵌入服务返回了空向量或非数组向量")
        try:
            values = [float(x) for x in vector]
        except (TypeError, ValueError):
            raise EmbeddingResponseError("嵌入服务返回的向量含非数字元素") from None
        if not all(math.isfinite(x) for x in values):
            raise EmbeddingResponseError("嵌入服务返回的向量含 NaN 或无穷大")
        return values

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed ``texts`` in batches; every vector has the same dimension."""
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of strings, not a string")
        if not texts:
            return []
        model = await self.resolve_model()
        out: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            out.extend(await self._embed_batch(model, list(texts[start : start + self.batch_size])))
        dims = {len(v) for v in out}
        if len(dims) != 1:
            raise EmbeddingResponseError(f"嵌入服务返回的向量维度不一致：{sorted(dims)}")
        return out

    def describe(self) -> str:
        return f"{self.protocol} {self.resolved_model or self.configured_model} @ {self.base_url}"
