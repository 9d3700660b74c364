"""Shared plumbing for the fake HTTP servers.

Both fake servers (embedding and chat) run an aiohttp application in a daemon thread
with its own event loop.  That way the same server can be reached from synchronous
code, from async tests running on a *different* loop, and from subprocesses, and a
test that blocks its own loop can never starve the server.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Collection
from types import TracebackType
from typing import Any, Self

from aiohttp import web

#: How long start()/stop() wait for the server thread before giving up.
_THREAD_TIMEOUT = 15.0


class FailureMode:
    """Thread-safe failure switch shared by the fake servers.

    ``set("error500", after=2)`` lets the next two calls succeed; every call after
    that fails in the given mode until the switch is set back to ``"ok"``.  This lets
    a test break a dependency in the middle of a multi-step operation.
    """

    def __init__(self, valid: Collection[str]) -> None:
        self._valid = frozenset(valid) | {"ok"}
        self._lock = threading.Lock()
        self._mode = "ok"
        self._after = 0

    def set(self, mode: str, after: int = 0) -> None:
        """Switch to ``mode`` after ``after`` more successful calls."""
        if mode not in self._valid:
            raise ValueError(f"unknown mode {mode!r}; expected one of {sorted(self._valid)}")
        if after < 0:
            raise ValueError("after must be >= 0")
        with self._lock:
            self._mode = mode
            self._after = after

    def reset(self) -> None:
        """Go back to ``"ok"``."""
        self.set("ok")

    def take(self) -> str:
        """Account for one call and return the mode it must be served in."""
        with self._lock:
            if self._mode == "ok":
                return "ok"
            if self._after > 0:
                self._after -= 1
                return "ok"
            return self._mode

    def peek(self) -> str:
        """Return the mode the next call would fail in, without consuming a call."""
        with self._lock:
            return "ok" if self._after > 0 else self._mode


class ThreadedAppServer:
    """Base class: an aiohttp app served from a background daemon thread.

    Subclasses implement :meth:`_add_routes` and call :meth:`_hang` /
    :meth:`_drop_connection` to simulate an unresponsive or crashing upstream.
    Every server also exposes ``POST /_control`` (``{"mode": ..., "after": n}``) so
    that tests driving a subprocess can switch failure modes over HTTP.
    """

    host = "127.0.0.1"

    def __init__(self, *, port: int = 0, modes: Collection[str]) -> None:
        self._lock = threading.Lock()
        self._port = port
        self.mode = FailureMode(modes)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._stopping: asyncio.Event | None = None

    # ------------------------------------------------------------------ properties
    @property
    def port(self) -> int:
        """The bound port (the ephemeral port is kept across restarts)."""
        with self._lock:
            return self._port

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:PORT``."""
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        """Whether the server is currently listening."""
        with self._lock:
            return self._thread is not None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start listening; blocks until the socket is bound.  No-op if running."""
        with self._lock:
            if self._thread is not None:
                return
            loop = asyncio.new_event_loop()
            ready = threading.Event()
            errors: list[BaseException] = []
            thread = threading.Thread(
                target=self._run,
                args=(loop, ready, errors),
                name=f"{type(self).__name__}-{self._port}",
                daemon=True,
            )
            thread.start()
            if not ready.wait(_THREAD_TIMEOUT):
                raise RuntimeError(f"{type(self).__name__} did not start in time")
            if errors:
                thread.join(_THREAD_TIMEOUT)
                raise errors[0]
            self._thread = thread
            self._loop = loop

    def stop(self) -> None:
        """Stop the server, aborting hanging handlers.  Idempotent."""
        with self._lock:
            thread, loop = self._thread, self._loop
            self._thread = self._loop = None
        if thread is None or loop is None:
            return
        future = asyncio.run_coroutine_threadsafe(self._shutdown(), loop)
        try:
            future.result(_THREAD_TIMEOUT)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(_THREAD_TIMEOUT)

    def restart(self) -> None:
        """Stop and start again on the same port (simulates an upstream restart)."""
        self.stop()
        self.start()

    def set_mode(self, mode: str, after: int = 0) -> None:
        """Fail in ``mode`` after ``after`` more successful calls (see FailureMode)."""
        self.mode.set(mode, after)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------ internals
    def _add_routes(self, app: web.Application) -> None:
        """Register the server's routes; implemented by subclasses."""
        raise NotImplementedError

    def _run(
        self, loop: asyncio.AbstractEventLoop, ready: threading.Event, errors: list[BaseException]
    ) -> None:
        """Thread body: bind, signal readiness, serve until stop() stops the loop."""
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._setup())
        except BaseException as exc:
            errors.append(exc)
            ready.set()
            loop.close()
            return
        ready.set()
        try:
            loop.run_forever()
        finally:
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()

    async def _setup(self) -> None:
        """Build a fresh app (apps cannot be reused after cleanup) and bind it."""
        app = web.Application()
        app.router.add_post("/_control", self._handle_control)
        self._add_routes(app)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.host, self._port)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._port = runner.addresses[0][1]
        self._runner = runner
        self._stopping = asyncio.Event()

    async def _shutdown(self) -> None:
        """Release hanging handlers, then close the listener and all connections."""
        if self._stopping is not None:
            self._stopping.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _hang(self, request: web.Request) -> web.StreamResponse:
        """Never answer; when the server stops, drop the connection instead."""
        assert self._stopping is not None
        await self._stopping.wait()
        return self._drop_connection(request)

    @staticmethod
    def _drop_connection(request: web.Request) -> web.StreamResponse:
        """Close the socket without writing a response (client sees a disconnect)."""
        if request.transport is not None:
            request.transport.close()
        # Writing this response fails silently: aiohttp treats it as a client disconnect.
        return web.Response()

    async def _handle_control(self, request: web.Request) -> web.Response:
        """``POST /_control {"mode": str, "after": int}`` -> set_mode over HTTP."""
        try:
            body: Any = json.loads(await request.read())
            mode, after = str(body["mode"]), int(body.get("after", 0))
            self.set_mode(mode, after)
        except (ValueError, KeyError, TypeError) as exc:
            return web.json_response({"error": str(exc)}, status=400)
        return web.json_response({"mode": mode, "after": after})
