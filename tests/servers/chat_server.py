"""Fake OpenAI-compatible chat-completions server driven by a script of replies.

Tests script what "the model" says (plain text or tool calls) and then inspect the
request bodies the code under test sent.  Both ``stream=false`` and SSE streaming are
implemented closely enough for the official ``openai`` SDK to accept them.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from ._thread import ThreadedAppServer

#: Failure modes understood by :meth:`ChatServer.set_mode`.
CHAT_MODES = ("ok", "error500", "error503", "hang", "close")

#: Usage reported for every completion (fixed so tests can assert on it), with the
#: cached share of the prompt as OpenAI (``prompt_tokens_details.cached_tokens``) and
#: DeepSeek (``prompt_cache_hit_tokens`` / ``prompt_cache_miss_tokens``) report it.
USAGE: dict[str, Any] = {
    "prompt_tokens": 11,
    "completion_tokens": 7,
    "total_tokens": 18,
    "prompt_tokens_details": {"cached_tokens": 4},
    "prompt_cache_hit_tokens": 4,
    "prompt_cache_miss_tokens": 7,
}

Rule = Callable[[dict[str, Any]], "Reply | None"]


@dataclass(frozen=True)
class ToolCall:
    """One function call; ``arguments`` is the raw JSON string sent to the client."""

    name: str
    arguments: str


def _arguments(value: dict[str, Any] | str) -> str:
    # Strings are sent verbatim so tests can feed malformed JSON to the code under test.
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


@dataclass(frozen=True)
class Reply:
    """What the fake model answers: text content and/or tool calls."""

    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = field(default=())
    delay: float = 0.0
    """Seconds the server waits before answering (a slow model; other requests go on)."""
    hold: threading.Event | None = field(default=None, compare=False)
    """The server answers only once this is set (a model that is still thinking, however
    long the test takes; other requests go on). A stopping server answers anyway."""
    status: int = 200
    """An HTTP error status to answer with instead (a failing model for this request only)."""

    @staticmethod
    def text(content: str) -> Reply:
        """A plain assistant message."""
        return Reply(content=content)

    @staticmethod
    def tool_call(
        name: str, arguments: dict[str, Any] | str, *more: tuple[str, dict[str, Any] | str]
    ) -> Reply:
        """One message carrying one or several tool calls."""
        calls = [(name, arguments), *more]
        return Reply(tool_calls=tuple(ToolCall(n, _arguments(a)) for n, a in calls))


def _tool_names(body: dict[str, Any]) -> list[str]:
    names: list[str] = []
    for tool in body.get("tools") or []:
        if isinstance(tool, dict) and isinstance(tool.get("function"), dict):
            names.append(str(tool["function"].get("name")))
    return names


def _pieces(text: str, parts: int) -> Iterator[str]:
    """Split ``text`` into about ``parts`` chunks, so clients must concatenate deltas."""
    size = max(1, math.ceil(len(text) / parts))
    for i in range(0, len(text), size):
        yield text[i : i + size]


class ChatServer(ThreadedAppServer):
    """Scripted ``POST /v1/chat/completions`` plus ``GET /v1/models``.

    Reply selection per request: a content-safety check (``tools`` contain only a
    tool named ``report``) gets ``default_text``; otherwise the rule, then the
    script FIFO, then ``default_text``.
    """

    def __init__(self, *, port: int = 0, default_text: str = "好的") -> None:
        super().__init__(port=port, modes=CHAT_MODES)
        self.default_text = default_text
        self._script: deque[Reply] = deque()
        self._rule: Rule | None = None
        self._requests: list[dict[str, Any]] = []
        self._ids = itertools.count(1)
        self._usage: dict[str, Any] | None = USAGE

    # ------------------------------------------------------------------ control API
    @property
    def base_url(self) -> str:
        """OpenAI base URL, e.g. ``http://127.0.0.1:PORT/v1``."""
        return f"{self.url}/v1"

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Snapshot of every chat-completion request body, in order."""
        with self._lock:
            return list(self._requests)

    @property
    def pending(self) -> int:
        """Replies left in the script."""
        with self._lock:
            return len(self._script)

    def script(self, *replies: Reply) -> None:
        """Append replies to the FIFO consumed by successive requests."""
        with self._lock:
            self._script.extend(replies)

    def set_rule(self, rule: Rule | None) -> None:
        """Consult ``rule(body)`` first for every request; ``None`` falls through."""
        with self._lock:
            self._rule = rule

    def set_usage(self, usage: dict[str, Any] | None) -> None:
        """Report ``usage`` with every completion from now on; ``None``: none at all (a
        provider that does not say what a request cost)."""
        with self._lock:
            self._usage = usage

    def _usage_now(self) -> dict[str, Any] | None:
        with self._lock:
            return json.loads(json.dumps(self._usage)) if self._usage is not None else None

    def clear(self) -> None:
        """Empty the script, drop the rule and recorded requests, mode back to "ok",
        usage back to :data:`USAGE`."""
        self.mode.reset()
        with self._lock:
            self._script.clear()
            self._rule = None
            self._requests.clear()
            self._usage = USAGE

    # ------------------------------------------------------------------ internals
    def _add_routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self._completions)
        app.router.add_get("/v1/models", self._models)

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "object": "list",
                "data": [{"id": "mock-model", "object": "model", "created": 0, "owned_by": "test"}],
            }
        )

    def _choose(self, body: dict[str, Any]) -> Reply:
        tools = _tool_names(body)
        if tools == ["report"]:
            return Reply.text(self.default_text)
        with self._lock:
            rule = self._rule
        if rule is not None and (reply := rule(body)) is not None:
            return reply
        with self._lock:
            if not self._script:
                return Reply.text(self.default_text)
            if self._script[0].tool_calls and not tools:
                # A tool call cannot answer a request without tools: keep it queued.
                return Reply.text(self.default_text)
            return self._script.popleft()

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return _error(400, "We could not parse the JSON body of your request.")
        with self._lock:
            self._requests.append(body)
        mode = self.mode.take()
        if mode == "hang":
            return await self._hang(request)
        if mode == "close":
            return self._drop_connection(request)
        if mode in ("error500", "error503"):
            return _error(int(mode[-3:]), "The server had an error processing your request.")

        reply = self._choose(body)
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.hold is not None:
            assert self._stopping is not None
            while not reply.hold.is_set() and not self._stopping.is_set():  # noqa: ASYNC110 - a threading.Event
                await asyncio.sleep(0.01)
        if reply.status != 200:
            return _error(reply.status, "The server had an error processing your request.")
        with self._lock:
            completion_id = f"chatcmpl-{next(self._ids)}"
            call_ids = [f"call_{next(self._ids)}" for _ in reply.tool_calls]
        model = str(body.get("model") or "mock-model")
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return await self._stream(request, reply, completion_id, call_ids, model, include_usage)

        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call_id, call in zip(call_ids, reply.tool_calls, strict=True)
            ]
        return web.json_response(
            {
                "id": completion_id,
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "system_fingerprint": None,
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "logprobs": None,
                        "finish_reason": "tool_calls" if reply.tool_calls else "stop",
                    }
                ],
                "usage": self._usage_now(),
            }
        )

    async def _stream(
        self,
        request: web.Request,
        reply: Reply,
        completion_id: str,
        call_ids: list[str],
        model: str,
        include_usage: bool,
    ) -> web.StreamResponse:
        """Send the reply as ``chat.completion.chunk`` SSE events, then ``[DONE]``."""
        created = int(time.time())

        def chunk(choices: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> bytes:
            data: dict[str, Any] = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "system_fingerprint": None,
                "choices": choices,
            }
            if include_usage:
                data["usage"] = usage
            return f"data: {json.dumps(data, ensure_ascii=False)}\n\n".encode()

        def delta(content: dict[str, Any], finish_reason: str | None = None) -> bytes:
            return chunk(
                [{"index": 0, "delta": content, "logprobs": None, "finish_reason": finish_reason}]
            )

        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        await response.write(delta({"role": "assistant", "content": "" if reply.content else None}))
        for piece in _pieces(reply.content or "", 3):
            await response.write(delta({"content": piece}))
            await asyncio.sleep(0)
        for index, (call_id, call) in enumerate(zip(call_ids, reply.tool_calls, strict=True)):
            head = {"index": index, "id": call_id, "type": "function"}
            function = {"name": call.name, "arguments": ""}
            await response.write(delta({"tool_calls": [{**head, "function": function}]}))
            for piece in _pieces(call.arguments, 2):
                await response.write(
                    delta({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                )
        await response.write(delta({}, "tool_calls" if reply.tool_calls else "stop"))
        usage = self._usage_now()
        if include_usage and usage is not None:
            await response.write(chunk([], usage))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def _error(status: int, message: str) -> web.Response:
    """An OpenAI-shaped error response."""
    error_type = "server_error" if status >= 500 else "invalid_request_error"
    return web.json_response(
        {"error": {"message": message, "type": error_type, "param": None, "code": None}},
        status=status,
    )
