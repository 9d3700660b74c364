"""Fake embedding server speaking the real Ollama and OpenAI embedding protocols.

The vectors come from :func:`embed_text`, a deterministic bag-of-character-n-grams
hash, so that semantically "similar" strings (sharing many characters) really are
close to each other and vector-search tests can assert on ranking without a model.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import math
import struct
import time
from typing import Any

from aiohttp import web

from ._thread import ThreadedAppServer

#: Failure modes understood by :meth:`EmbeddingServer.set_mode`. ``hang`` stalls the
#: embedding endpoints only; ``hang_all`` also stalls the model lists (a service that
#: accepts connections and never answers anything).
EMBEDDING_MODES = (
    "ok",
    "error500",
    "error503",
    "hang",
    "hang_all",
    "wrong_dim",
    "wrong_count",
    "close",
)

DEFAULT_MODEL_DIMS: dict[str, int] = {
    "nomic-embed-text:latest": 384,
    "bge-m3:latest": 768,
    "text-embedding-3-small": 384,
}
#: Chat models listed before the embedding models (so "first model" heuristics are tested).
DEFAULT_CHAT_MODELS = ("qwen2.5:7b", "gpt-4o-mini")

_OLLAMA_ERRORS = {
    500: "llama runner process has terminated: exit status 2",
    503: "server busy, please try again.  maximum pending requests exceeded",
}
_OPENAI_ERRORS = {
    500: "The server had an error while processing your request. Sorry about that!",
    503: "The engine is currently overloaded, please try again later.",
}


def embed_text(text: str, dim: int) -> list[float]:
    """Return a deterministic, L2-normalised ``dim``-dimensional vector for ``text``.

    Character uni-, bi- and trigrams of the lower-cased text are hashed with blake2b
    (stable across processes, unlike ``hash()``) into signed buckets.  Characters are
    the units, so Chinese text works as well as English.  Empty text maps to a fixed
    unit vector.
    """
    if dim <= 0:
        raise ValueError("dim must be positive")
    normalised = " ".join(text.lower().split())
    vector = [0.0] * dim
    for n in (1, 2, 3):
        for i in range(len(normalised) - n + 1):
            gram = normalised[i : i + n]
            if gram.isspace():
                continue
            digest = hashlib.blake2b(gram.encode("utf-8"), digest_size=8).digest()
            bucket = int.from_bytes(digest[:4], "little") % dim
            vector[bucket] += 1.0 if digest[4] & 1 else -1.0
    norm = math.sqrt(sum(x * x for x in vector))
    if norm == 0.0:
        return [1.0 / math.sqrt(dim)] * dim
    return [x / norm for x in vector]


def _is_embedding_model(name: str) -> bool:
    return "embed" in name or "bge" in name


def _family(name: str) -> str:
    if _is_embedding_model(name):
        return "nomic-bert" if "nomic" in name else "bert"
    return "qwen2" if "qwen" in name else "llama"


def _ollama_model_entry(name: str) -> dict[str, Any]:
    """A realistic ``/api/tags`` entry (sizes/digests derived from the name)."""
    family = _family(name)
    embed = _is_embedding_model(name)
    digest = hashlib.sha256(name.encode()).hexdigest()
    return {
        "name": name,
        "model": name,
        "modified_at": "2025-01-15T10:30:00.123456789+08:00",
        "size": (274_302_450 if embed else 4_683_087_332) + int(digest[:4], 16),
        "digest": digest,
        "details": {
            "parent_model": "",
            "format": "gguf",
            "family": family,
            "families": [family],
            "parameter_size": "137M" if embed else "7.6B",
            "quantization_level": "F16" if embed else "Q4_K_M",
        },
    }


def _token_count(texts: list[str]) -> int:
    """A rough token count (one per character), good enough for usage fields."""
    return sum(len(t) for t in texts)


def _parse_inputs(body: Any) -> tuple[str, list[str]] | str:
    """Return ``(model, inputs)`` or an error message for a malformed body."""
    if not isinstance(body, dict):
        return "invalid request body: expected a JSON object"
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        return "invalid model: expected a string"
    raw = body.get("input")
    if isinstance(raw, str):
        inputs = [raw]
    elif isinstance(raw, list) and all(isinstance(x, str) for x in raw):
        inputs = list(raw)
    else:
        return "invalid input type: expected a string or a list of strings"
    return model or "", inputs


class EmbeddingServer(ThreadedAppServer):
    """Ollama (``/api/embed``, ``/api/tags``) + OpenAI (``/v1/embeddings``, ``/v1/models``).

    ``url`` is the Ollama-style base; the OpenAI base URL is ``url + "/v1"``.
    """

    def __init__(
        self, *, port: int = 0, default_dim: int = 384, api_key: str | None = None
    ) -> None:
        super().__init__(port=port, modes=EMBEDDING_MODES)
        self.default_dim = default_dim
        self.api_key = api_key
        self.model_dims: dict[str, int] = dict(DEFAULT_MODEL_DIMS)
        self._models: list[str] | None = None
        self._requests: list[dict[str, Any]] = []
        self._embed_calls = 0
        self._fail_next: list[str] = []
        self.delay = 0.0
        """Seconds each embedding answer takes (a slow service: a batch in flight for a while)."""

    # ------------------------------------------------------------------ control API
    @property
    def requests(self) -> list[dict[str, Any]]:
        """Snapshot of every request: ``{"path", "method", "body", "headers"}``."""
        with self._lock:
            return list(self._requests)

    @property
    def embed_calls(self) -> int:
        """Number of embedding requests answered with HTTP 200."""
        with self._lock:
            return self._embed_calls

    @property
    def models(self) -> list[str]:
        """Model names listed by ``/api/tags`` and ``/v1/models``."""
        with self._lock:
            if self._models is not None:
                return list(self._models)
            return [*DEFAULT_CHAT_MODELS, *self.model_dims]

    def set_models(self, names: list[str]) -> None:
        """Replace the listed models (names with "embed"/"bge" are embedding models)."""
        with self._lock:
            self._models = list(names)

    def fail_next(self, mode: str, count: int = 1) -> None:
        """Serve the next ``count`` embedding requests in ``mode``, then the current mode again.

        The opposite of ``set_mode(mode, after=n)``: failures first, then
        success, e.g. a transient 503 that a retry gets past.
        """
        if mode not in EMBEDDING_MODES:
            raise ValueError(f"unknown mode {mode!r}; expected one of {list(EMBEDDING_MODES)}")
        with self._lock:
            self._fail_next = [mode] * count

    def embed_requests(self) -> list[dict[str, Any]]:
        """The recorded requests to ``/api/embed`` and ``/v1/embeddings``."""
        return [r for r in self.requests if r["path"] in ("/api/embed", "/v1/embeddings")]

    def reset(self) -> None:
        """Back to mode "ok", default model list and dimensions, no recorded requests or calls."""
        self.mode.reset()
        with self._lock:
            self._requests.clear()
            self._embed_calls = 0
            self._models = None
            self._fail_next = []
            self.delay = 0.0
            self.model_dims = dict(DEFAULT_MODEL_DIMS)  # a test's swapped model never leaks

    def dim_for(self, model: str) -> int | None:
        """Dimension served for ``model``, or None if the model is unknown (404)."""
        name = self._resolve(model)
        if name is None:
            return None
        with self._lock:
            return self.model_dims.get(name, self.default_dim)

    # ------------------------------------------------------------------ internals
    def _take_mode(self) -> str:
        """The mode of one embedding request: queued ``fail_next`` modes first."""
        with self._lock:
            queued = self._fail_next.pop(0) if self._fail_next else None
        mode = queued or self.mode.take()
        return "hang" if mode == "hang_all" else mode

    async def _listing_fault(self, request: web.Request) -> web.StreamResponse | None:
        """``hang_all`` stalls the model lists too (other modes leave them alone)."""
        if self.mode.peek() == "hang_all":
            return await self._hang(request)
        return None

    def _resolve(self, model: str) -> str | None:
        """Map a requested name to a known model; like Ollama, a bare name means ":latest"."""
        if not model:
            return None
        known = set(self.models) | set(self.model_dims)
        if model in known:
            return model
        if ":" not in model and f"{model}:latest" in known:
            return f"{model}:latest"
        return None

    def _add_routes(self, app: web.Application) -> None:
        app.middlewares.append(self._record)
        app.router.add_post("/api/embed", self._ollama_embed)
        app.router.add_get("/api/tags", self._ollama_tags)
        app.router.add_post("/v1/embeddings", self._openai_embed)
        app.router.add_get("/v1/models", self._openai_models)

    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Record every request (except /_control) before it is handled."""
        if request.path != "/_control":
            raw = await request.read()
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = None
            entry = {
                "path": request.path,
                "method": request.method,
                "body": body,
                "headers": dict(request.headers),
            }
            with self._lock:
                self._requests.append(entry)
        return await handler(request)

    def _vectors(self, mode: str, inputs: list[str], dim: int) -> list[list[float]]:
        """Compute the vectors, corrupted as the failure mode demands."""
        vectors = [embed_text(text, dim) for text in inputs]
        if mode == "wrong_dim":
            vectors = [v[:-1] for v in vectors]
        elif mode == "wrong_count":
            vectors = vectors[:-1]
        with self._lock:
            self._embed_calls += 1
        return vectors

    async def _ollama_embed(self, request: web.Request) -> web.StreamResponse:
        started = time.perf_counter_ns()
        try:
            parsed = _parse_inputs(await request.json())
        except ValueError:
            parsed = "invalid request body: not JSON"
        if isinstance(parsed, str):
            return web.json_response({"error": parsed}, status=400)
        model, inputs = parsed
        dim = self.dim_for(model)
        if dim is None:
            return web.json_response(
                {"error": f'model "{model}" not found, try pulling it first'}, status=404
            )
        mode = self._take_mode()
        if self.delay:
            await asyncio.sleep(self.delay)
        if mode == "hang":
            return await self._hang(request)
        if mode == "close":
            return self._drop_connection(request)
        if mode in ("error500", "error503"):
            status = int(mode[-3:])
            return web.json_response({"error": _OLLAMA_ERRORS[status]}, status=status)
        vectors = self._vectors(mode, inputs, dim)
        return web.json_response(
            {
                "model": model,
                "embeddings": vectors,
                "total_duration": time.perf_counter_ns() - started,
                "load_duration": 0,
                "prompt_eval_count": _token_count(inputs),
            }
        )

    async def _ollama_tags(self, request: web.Request) -> web.StreamResponse:
        if (stalled := await self._listing_fault(request)) is not None:
            return stalled
        if self.mode.peek() == "error500":
            return web.json_response({"error": _OLLAMA_ERRORS[500]}, status=500)
        return web.json_response({"models": [_ollama_model_entry(n) for n in self.models]})

    def _openai_auth_error(self, request: web.Request) -> web.Response | None:
        if self.api_key is None:
            return None
        if request.headers.get("Authorization") == f"Bearer {self.api_key}":
            return None
        return _openai_error(401, "Incorrect API key provided", code="invalid_api_key")

    async def _openai_embed(self, request: web.Request) -> web.StreamResponse:
        if (denied := self._openai_auth_error(request)) is not None:
            return denied
        try:
            body = await request.json()
            parsed = _parse_inputs(body)
        except ValueError:
            body, parsed = None, "We could not parse the JSON body of your request."
        if isinstance(parsed, str):
            return _openai_error(400, parsed)
        model, inputs = parsed
        if not inputs:
            return _openai_error(400, "'input' must not be empty", param="input")
        dim = self.dim_for(model)
        if dim is None:
            return _openai_error(
                404,
                f"The model `{model}` does not exist or you do not have access to it.",
                code="model_not_found",
            )
        mode = self._take_mode()
        if self.delay:
            await asyncio.sleep(self.delay)
        if mode == "hang":
            return await self._hang(request)
        if mode == "close":
            return self._drop_connection(request)
        if mode in ("error500", "error503"):
            status = int(mode[-3:])
            return _openai_error(status, _OPENAI_ERRORS[status], error_type="server_error")
        vectors = self._vectors(mode, inputs, dim)
        as_base64 = isinstance(body, dict) and body.get("encoding_format") == "base64"
        tokens = _token_count(inputs)
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {
                        "object": "embedding",
                        "index": i,
                        # The openai SDK asks for base64 (little-endian float32) by default.
                        "embedding": _to_base64(v) if as_base64 else v,
                    }
                    for i, v in enumerate(vectors)
                ],
                "model": model,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    async def _openai_models(self, request: web.Request) -> web.StreamResponse:
        if (denied := self._openai_auth_error(request)) is not None:
            return denied
        if (stalled := await self._listing_fault(request)) is not None:
            return stalled
        if self.mode.peek() == "error500":
            return _openai_error(500, _OPENAI_ERRORS[500], error_type="server_error")
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {"id": n, "object": "model", "created": 1_700_000_000, "owned_by": "library"}
                    for n in self.models
                ],
            }
        )


def _to_base64(vector: list[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


def _openai_error(
    status: int,
    message: str,
    *,
    error_type: str = "invalid_request_error",
    code: str | None = None,
    param: str | None = None,
) -> web.Response:
    """An error response shaped like OpenAI's (parsed by the openai SDK)."""
    return web.json_response(
        {"error": {"message": message, "type": error_type, "param": param, "code": code}},
        status=status,
    )
