"""Async embedding client for Ollama (``/api/embed``) and OpenAI (``/v1/embeddings``).

One :class:`EmbeddingClient` per process owns one ``aiohttp`` session. It
batches inputs and checks that the service returned one vector per input, all
of one dimension. Failures surface as :class:`EmbeddingError` subclasses whose
messages can be shown to an operator or returned to the LLM as a tool error.

Deadlines: every operation (one embedding batch, or resolving ``auto``) has
ONE deadline of ``timeout`` seconds covering all its attempts and backoff
sleeps, so a hung service costs a chat turn at most ``EMBEDDING_TIMEOUT_SECONDS``.
Refused or dropped connections and 5xx answers are retried inside that
deadline; a timeout is never retried (a service that did not answer within the
deadline will not answer a second request any sooner). The start-up probe
(:meth:`EmbeddingClient.resolve_model` with ``probe=True``) uses a shorter
deadline and no retries: it is repeated at first use anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
from nonebot.log import logger

from ..core.config import EnvConfig
from ..core.errors import (
    EmbeddingConfigError,
    EmbeddingHTTPError,
    EmbeddingOff,
    EmbeddingResponseError,
    EmbeddingUnavailable,
)
from ..core.protocols import TextKind
from .local_model import LOCAL_BASE_URL, LOCAL_MODEL_NAME, embed_local, ensure_available
from .model_choice import (
    ListedModel,
    choose_embedding_model,
    listed_models,
)

__all__ = [
    "PROBE_TIMEOUT_MAX",
    "EmbeddingClient",
    "EmbeddingConfigError",
]

Protocol = Literal["openai", "ollama-embed", "local"]


PROBE_TIMEOUT_MAX = 5.0
"""Upper bound of the start-up probe's deadline (seconds)."""

PinSource = Callable[[], Awaitable[str | None]]
"""Returns the model ``auto`` must keep using (the stored fingerprint's), or ``None``."""

EmbeddingHook = Callable[[], Awaitable[bool]]
"""Runs after a successful embedding; returns ``True`` when it need not run again."""


def _detail(body: Any, fallback: str) -> str:
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict):
            return str(err.get("message") or err)
        if err:
            return str(err)
    return fallback[:300]


@dataclass(frozen=True, slots=True)
class _Deadline:
    """One operation's deadline on the running loop's clock, and its length for messages."""

    at: float
    seconds: float

    @classmethod
    def after(cls, seconds: float) -> _Deadline:
        return cls(asyncio.get_running_loop().time() + seconds, seconds)

    def leaves(self, delay: float) -> bool:
        """Whether ``delay`` seconds from now are still before the deadline."""
        return asyncio.get_running_loop().time() + delay < self.at


class EmbeddingClient:
    """Embeds texts with the configured service.

    ``model="auto"`` is resolved once (:meth:`resolve_model`): to the model of
    the stored fingerprint when :attr:`pin_source` names one, else through the
    service's model list. The resolved name is what the fingerprint uses.
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
        query_prefix: str = "",
        document_prefix: str = "",
        input_type: Literal["none", "e5"] = "none",
        enabled: bool = True,
    ) -> None:
        if protocol not in ("openai", "ollama-embed", "local"):
            raise ValueError(f"unknown embedding protocol {protocol!r}")
        self.protocol: Protocol = protocol
        self.base_url = LOCAL_BASE_URL if protocol == "local" else base_url.rstrip("/")
        # The local model has its own query/passage modes: raw prefixes would double them.
        local = protocol == "local"
        self.query_prefix = "" if local else query_prefix
        self.document_prefix = "" if local else document_prefix
        # ``input_type`` is a field of OpenAI-style requests only.
        self.input_type: Literal["none", "e5"] = input_type if protocol == "openai" else "none"
        self.configured_model = model.strip() or "auto"
        self.api_key = api_key
        self.timeout = timeout
        self.max_retries = max(0, max_retries)
        self.batch_size = max(1, batch_size)
        self.backoff = backoff
        self._resolved: str | None = (
            None if self.configured_model == "auto" or local else self.configured_model
        )
        self._session: aiohttp.ClientSession | None = None
        # asyncio.Lock binds to a loop only when contended: the start-up
        # check's private loop uses it uncontended, the bot's loop after it.
        self._resolve_lock = asyncio.Lock()
        self.pin_source: PinSource | None = None
        """Consulted first when resolving ``auto`` (set by the runtime; see :mod:`.fingerprint`)."""
        self._after_embedding: EmbeddingHook | None = None
        self._hook_lock: asyncio.Lock | None = None
        self.enabled = enabled
        """``EMBEDDING_ENABLED``: ``False`` is the keyword-only mode: :meth:`embed` raises
        :class:`~..core.errors.EmbeddingOff` at once (no request, no local model loaded)."""

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
            query_prefix=env.embedding_query_prefix,
            document_prefix=env.embedding_document_prefix,
            input_type=env.embedding_input_type,
            enabled=env.embedding_enabled,
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

    @property
    def has_open_session(self) -> bool:
        return self._session is not None and not self._session.closed

    @contextlib.contextmanager
    def session_set_aside(self) -> Iterator[None]:
        """Let code on another event loop use this client, then give the session back.

        An aiohttp session belongs to the event loop that created it: using or
        even closing it from another loop fails. The start-up check runs on a
        private loop in a worker thread while the bot's loop may already own a
        session. Inside this block the client has no session, so the other
        loop opens its own (and must :meth:`close` it before the block ends);
        afterwards the original session is back, untouched.
        """
        outer, self._session = self._session, None
        try:
            yield
        finally:
            self._session = outer

    @property
    def probe_timeout(self) -> float:
        """Deadline of the start-up probe: short, so a hung service cannot stall start-up."""
        return min(PROBE_TIMEOUT_MAX, self.timeout)

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

    async def _attempt(self, method: str, url: str, payload: dict[str, Any] | None) -> Any:
        """One request; HTTP errors become :class:`EmbeddingHTTPError`."""
        session = self._get_session()
        timeout = aiohttp.ClientTimeout(total=self.timeout)  # the deadline is usually shorter
        async with session.request(method, url, json=payload, timeout=timeout) as resp:
            text = await resp.text()
            try:
                body = await resp.json(content_type=None) if text else None
            except ValueError:
                body = None
            if resp.status >= 400:
                raise EmbeddingHTTPError(resp.status, _detail(body, text))
            if body is None:
                raise EmbeddingResponseError(f"嵌入服务返回了非 JSON 内容：{text[:200]!r}")
            return body

    async def _request(
        self,
        method: str,
        url: str,
        payload: dict[str, Any] | None,
        *,
        deadline: _Deadline,
        retries: int,
    ) -> Any:
        """A request with bounded retries, all of it before ``deadline``.

        Retried: refused/dropped connections and 5xx answers (with exponential
        backoff, and only while the next try still fits before the deadline).
        Never retried: a timeout, 4xx answers, unusable bodies.
        """
        attempt = 0
        try:
            async with asyncio.timeout_at(deadline.at):
                while True:
                    try:
                        return await self._attempt(method, url, payload)
                    except EmbeddingHTTPError as exc:
                        if exc.status < 500 or attempt >= retries:
                            raise
                        last: Exception = exc
                    except TimeoutError:
                        raise  # aiohttp's own timeouts too: never retried
                    except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
                        last = EmbeddingUnavailable(
                            f"嵌入服务无法连接（{url}，已重试 {attempt} 次）：{exc.__class__.__name__}"
                            f"{': ' + str(exc) if str(exc) else ''}"
                        )
                        if attempt >= retries:
                            raise last from exc
                    delay = self.backoff * (2**attempt)
                    if not deadline.leaves(delay):
                        raise last
                    attempt += 1
                    await asyncio.sleep(delay)
        except TimeoutError as exc:
            raise EmbeddingUnavailable(
                f"嵌入服务超时（{url}：{deadline.seconds:g} 秒内没有响应，超时不重试）"
            ) from exc

    # -- model resolution ----------------------------------------------------

    async def _list_entries(self, deadline: _Deadline, retries: int) -> list[ListedModel]:
        """``(name, families)`` of every listed model (families: Ollama only)."""
        if self.protocol == "openai":
            url = self._openai_base() + "/models"
        else:
            url = self._ollama_base() + "/api/tags"
        body = await self._request("GET", url, None, deadline=deadline, retries=retries)
        return listed_models(self.protocol, body)

    async def list_models(self) -> list[str]:
        """Names of the models the service lists."""
        if self.protocol == "local":
            return [LOCAL_MODEL_NAME]
        deadline = _Deadline.after(self.timeout)
        return [name for name, _ in await self._list_entries(deadline, self.max_retries)]

    async def _resolve(self, deadline: _Deadline, retries: int) -> str:
        if self._resolved is not None:
            return self._resolved
        if self.protocol == "local":
            return await self._resolve_local()
        async with self._resolve_lock:
            if self._resolved is None:
                pinned = await self.pin_source() if self.pin_source is not None else None
                if pinned:
                    logger.info(
                        f"[Memory] EMBEDDING_MODEL_NAME=auto：沿用记忆库指纹中记录的模型 {pinned}"
                    )
                    self._resolved = pinned
                else:
                    self._resolved = choose_embedding_model(
                        await self._list_entries(deadline, retries)
                    )
        return self._resolved

    async def _resolve_local(self) -> str:
        """The bundled model: loads it (a missing extra is a clear error), checks the name."""
        if self.configured_model not in ("auto", LOCAL_MODEL_NAME):
            raise EmbeddingConfigError(
                f"EMBEDDING_PROCTOL=local 只提供内置模型 {LOCAL_MODEL_NAME}，"
                f"但 EMBEDDING_MODEL_NAME={self.configured_model}：请改为 auto 或 {LOCAL_MODEL_NAME}"
            )
        await ensure_available()
        self._resolved = LOCAL_MODEL_NAME
        return self._resolved

    async def resolve_model(self, *, probe: bool = False) -> str:
        """The model name actually used (resolving ``auto`` once).

        ``probe=True`` (the start-up check, ``status``): a short deadline
        (:attr:`probe_timeout`) and no retries; a failed probe is not cached,
        so the first real use resolves again with the full deadline.
        """
        if probe:
            return await self._resolve(_Deadline.after(self.probe_timeout), 0)
        return await self._resolve(_Deadline.after(self.timeout), self.max_retries)

    @property
    def resolved_model(self) -> str | None:
        return self._resolved

    # -- first-success hook ------------------------------------------------------

    def run_after_embedding(self, hook: EmbeddingHook | None) -> None:
        """Run ``hook`` after every successful embedding until it returns ``True``.

        It runs before the vectors are handed back, one call at a time: while
        it runs, no caller of :meth:`embed` in this process can write vectors.
        Used to record the fingerprint at the first embedding when the
        start-up check could not (see :mod:`.startup`). ``None`` disarms.
        """
        self._after_embedding = hook

    async def _run_hook(self) -> None:
        hook = self._after_embedding
        if hook is None:
            return
        if self._hook_lock is None:
            self._hook_lock = asyncio.Lock()
        async with self._hook_lock:
            if self._after_embedding is hook and await hook():
                self._after_embedding = None

    # -- embedding -------------------------------------------------------------

    async def _embed_batch(
        self, model: str, texts: list[str], deadline: _Deadline, kind: TextKind
    ) -> list[list[float]]:
        if self.protocol == "local":
            vectors: Any = await embed_local(texts, kind)
        elif self.protocol == "openai":
            payload: dict[str, Any] = {"model": model, "input": texts, "encoding_format": "float"}
            if self.input_type == "e5":
                payload["input_type"] = "query" if kind == "query" else "passage"
            body = await self._request(
                "POST",
                self._openai_base() + "/embeddings",
                payload,
                deadline=deadline,
                retries=self.max_retries,
            )
            data = body.get("data") if isinstance(body, dict) else None
            if not isinstance(data, list):
                raise EmbeddingResponseError("嵌入服务的响应缺少 data 字段")
            ordered = sorted(data, key=lambda d: d.get("index", 0) if isinstance(d, dict) else 0)
            vectors = [d.get("embedding") if isinstance(d, dict) else None for d in ordered]
        else:
            body = await self._request(
                "POST",
                self._ollama_base() + "/api/embed",
                {"model": model, "input": texts},
                deadline=deadline,
                retries=self.max_retries,
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

    async def embed(self, texts: Sequence[str], kind: TextKind = "document") -> list[list[float]]:
        """Embed ``texts`` in batches; every vector has the same dimension.

        ``kind`` selects the configured prefix (and ``input_type``): queries
        and stored texts are presented to instruction-trained models differently.

        The first batch shares its deadline with resolving ``auto`` (one chat
        tool call = one deadline); every further batch gets a deadline of its own.
        """
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of strings, not a string")
        if not texts:
            return []
        if not self.enabled:
            raise EmbeddingOff()
        deadline = _Deadline.after(self.timeout)
        model = await self._resolve(deadline, self.max_retries)
        out: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            if start:
                deadline = _Deadline.after(self.timeout)
            prefix = self.query_prefix if kind == "query" else self.document_prefix
            batch = [prefix + t for t in texts[start : start + self.batch_size]]
            out.extend(await self._embed_batch(model, batch, deadline, kind))
        dims = {len(v) for v in out}
        if len(dims) != 1:
            raise EmbeddingResponseError(f"嵌入服务返回的向量维度不一致：{sorted(dims)}")
        await self._run_hook()
        return out

    def describe(self) -> str:
        if not self.enabled:
            return "已关闭（EMBEDDING_ENABLED=false，关键词检索）"
        return f"{self.protocol} {self.resolved_model or self.configured_model} @ {self.base_url}"
