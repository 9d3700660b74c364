"""A reverse proxy in front of the real ``chroma run`` that can stretch a collection's drop.

Chroma deletes a collection in a few milliseconds, and a request that reaches
it meanwhile is answered with an internal error (measured on chromadb 1.5.x:
HTTP 412, ``ChromaError: Missing field: [Missing metadata segment]``) rather
than "does not exist". Under load that window is hit by chance only. The
proxy makes it as long as a test wants: :meth:`ChromaProxy.hold_drop` arms it
for one collection name; when the ``DELETE`` of that collection arrives, the
proxy holds it (the collection is "being dropped") and answers every request
addressed to the collection's id exactly as Chroma answers during a drop,
until :meth:`ChromaProxy.release_drop` lets the ``DELETE`` through.
:meth:`ChromaProxy.answer_as_dropped` gives that answer for a collection id
without a ``DELETE`` (a reply that left Chroma during a drop and arrives after
the swap). :meth:`ChromaProxy.hold_write` holds the n-th ``POST`` whose path ends in a
given verb (``/update``: a process in the middle of rewriting a collection page by page)
and, once released, answers it with an error without ever forwarding it (a request of a
process killed meanwhile never lands). Everything else is forwarded unchanged, so the
plugin talks to a real Chroma server.
"""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING

import aiohttp
from aiohttp import web

from ._thread import ThreadedAppServer

if TYPE_CHECKING:
    from .chroma_server import ChromaServer

__all__ = ["DROP_ERROR", "ChromaProxy"]

DROP_STATUS = 412
DROP_ERROR = {"error": "ChromaError", "message": "Missing field: [Missing metadata segment]"}
"""Chroma's answer to a request on a collection whose drop is in progress (captured verbatim)."""

_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "content-length",
    "content-encoding",
    "host",
}
_WAIT_STEP = 0.05


def _collection_key(path: str) -> str | None:
    """The segment after ``collections`` in a Chroma API path (a name or an id)."""
    parts = path.strip("/").split("/")
    if "collections" not in parts:
        return None
    at = parts.index("collections")
    return parts[at + 1] if at + 1 < len(parts) else None


class ChromaProxy(ThreadedAppServer):
    """Forwards everything to ``backend``; can hold one collection's drop (see the module)."""

    def __init__(self, backend: ChromaServer) -> None:
        super().__init__(modes=())
        self.backend = backend
        self._guard = threading.Lock()
        self._armed: str | None = None
        self._dropping: set[str] = set()
        """Ids of collections answered as being dropped."""
        self._release = threading.Event()
        self.drop_held = threading.Event()
        """Set when the armed collection's ``DELETE`` arrived and is being held."""
        self.drop_answers = 0
        """Requests answered with Chroma's mid-drop error."""
        self._session: aiohttp.ClientSession | None = None
        self._write_verb: str | None = None
        self._write_skip = 0
        self._write_release = threading.Event()
        self.write_held = threading.Event()
        """Set when the armed write arrived and is being held (:meth:`hold_write`)."""

    # ------------------------------------------------------------------ controls
    def hold_write(self, verb: str, *, skip: int = 0) -> None:
        """Let ``skip`` ``POST …/<verb>`` requests through, then hold the next one until
        :meth:`drop_held_write`, which fails it without forwarding."""
        with self._guard:
            self._write_verb, self._write_skip = verb, skip
        self._write_release.clear()
        self.write_held.clear()

    def drop_held_write(self) -> None:
        """Answer the held write with HTTP 503; it never reaches Chroma."""
        with self._guard:
            self._write_verb = None
        self._write_release.set()

    def hold_drop(self, name: str) -> None:
        """Hold the next ``DELETE`` of collection ``name`` until :meth:`release_drop`."""
        with self._guard:
            self._armed = name
        self._release.clear()
        self.drop_held.clear()

    def release_drop(self) -> None:
        """Let a held ``DELETE`` through (and any later one: nothing is armed any more)."""
        with self._guard:
            self._armed = None
        self._release.set()

    def answer_as_dropped(self, collection_id: object) -> None:
        """Answer every request on ``collection_id`` with Chroma's mid-drop error from now on."""
        with self._guard:
            self._dropping.add(str(collection_id))

    async def wait_held(self) -> None:
        """Wait (off the caller's loop) until the armed ``DELETE`` is being held."""
        while not await asyncio.to_thread(self.drop_held.wait, _WAIT_STEP * 10):
            pass

    # ------------------------------------------------------------------ server
    def _add_routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/{tail:.*}", self._handle)

    async def _setup(self) -> None:
        await super()._setup()
        self._session = aiohttp.ClientSession(
            self.backend.url, auto_decompress=False, timeout=aiohttp.ClientTimeout(total=120)
        )

    async def _shutdown(self) -> None:
        self._release.set()  # a held DELETE must not keep the server up
        self._write_release.set()
        await super()._shutdown()
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        key = _collection_key(request.path)
        with self._guard:
            dropping, armed = key in self._dropping, self._armed
        if dropping:
            with self._guard:
                self.drop_answers += 1
            return web.json_response(DROP_ERROR, status=DROP_STATUS)
        if request.method == "DELETE" and key is not None and key == armed:
            return await self._held_delete(request)
        if request.method == "POST" and self._takes_write(request.path):
            self.write_held.set()
            while not await asyncio.to_thread(self._write_release.wait, _WAIT_STEP):
                pass
            return web.json_response({"error": "held by the test proxy"}, status=503)
        return await self._forward(request)

    def _takes_write(self, path: str) -> bool:
        with self._guard:
            verb = self._write_verb
            if verb is None or not path.rstrip("/").endswith("/" + verb):
                return False
            if self._write_skip:
                self._write_skip -= 1
                return False
            self._write_verb = None  # one request only
            return True

    async def _held_delete(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        async with self._session.get(request.path) as found:
            body = await found.json() if found.status == 200 else {}
        held = str(body.get("id") or "")
        with self._guard:
            self._dropping.add(held)
        self.drop_held.set()
        try:
            while not await asyncio.to_thread(self._release.wait, _WAIT_STEP):
                pass
            return await self._forward(request)
        finally:
            with self._guard:
                self._dropping.discard(held)

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        async with self._session.request(
            request.method,
            request.rel_url.path_qs,
            headers=headers,
            data=await request.read(),
        ) as upstream:
            body = await upstream.read()
            out = {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_BY_HOP}
            return web.Response(status=upstream.status, body=body, headers=out)
