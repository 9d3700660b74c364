"""The local ChromaDB in a child process: ``chroma run`` on 127.0.0.1, owned by the bot.

Why: the embedded ChromaDB's Rust bindings hold the GIL for the whole of a
write (chromadb releases it for reads only), so a write running in a worker
thread still stalls the event loop: an archive sweep of 100,000 memories
stalled chat turns for up to half a second, and a write that makes Chroma
persist a large vector index does the same to every chat. Served from a child
process, the same data directory (same on-disk format) is written by the
server while the bot's worker thread only waits on a socket, GIL released.

Lifetime: :class:`LocalChromaServer` starts the server (a free loopback port,
request logging off) from a supervisor thread that lives as long as the child,
and the child is asked (Linux ``PR_SET_PDEATHSIG``) to be killed when that
thread, i.e. the bot, dies: a ``kill -9`` of the bot never leaves a server
writing the data directory behind. :meth:`stop` terminates it (SIGTERM, then
SIGKILL after a grace period). The data directory lock of
:class:`~.chroma.ChromaConnection` is held by the bot for as long as the
server may run, so a maintenance command never opens the directory meanwhile.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from pathlib import Path

from nonebot.log import logger

__all__ = ["LocalChromaServer", "can_supervise", "chroma_command"]

LOOPBACK = "127.0.0.1"
START_TIMEOUT = 60.0
STOP_GRACE = 10.0
_PR_SET_PDEATHSIG = 1
_TAIL_LINES = 40


def can_supervise() -> bool:
    """Whether a child server dies with the bot here (Linux ``PR_SET_PDEATHSIG``).

    Elsewhere a bot that crashed could leave a server writing the data
    directory, and the next start would open a second one: not worth it.
    """
    return sys.platform.startswith("linux")


def chroma_command() -> list[str]:
    """How to run chromadb's own CLI with this interpreter (no PATH lookup)."""
    return [sys.executable, "-c", "import sys; from chromadb.cli.cli import app; app()"]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class LocalChromaServer:
    """``chroma run --path <data dir>`` on a free loopback port, supervised.

    Blocking methods: call them from a worker thread (the connection does).
    """

    def __init__(self, path: Path, *, start_timeout: float = START_TIMEOUT) -> None:
        self.path = path
        self.start_timeout = start_timeout
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._tail: deque[str] = deque(maxlen=_TAIL_LINES)
        self._ready = threading.Event()
        self._failed: BaseException | None = None
        self._stopping = False
        self._exited = threading.Event()

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def alive(self) -> bool:
        # Not ``poll()``: while the supervisor waits on the child, poll() cannot tell.
        return self._proc is not None and not self._exited.is_set()

    def died(self, within: float = 0.5) -> bool:
        """Whether the child has exited (waiting up to ``within`` seconds for the news:
        a call that just failed may have seen the socket close first)."""
        return self._proc is None or self._exited.wait(within)

    def output_tail(self) -> str:
        """The server's last lines of output (for an error message)."""
        return "\n".join(self._tail)

    # -- starting ---------------------------------------------------------------------

    def start(self) -> None:
        """Start the server and wait until it answers; raises ``RuntimeError`` if it cannot."""
        if self.alive():
            return
        self.path.mkdir(parents=True, exist_ok=True)
        self._ready.clear()
        self._exited = threading.Event()  # one per child: an old supervisor keeps its own
        self._failed = None
        self._stopping = False
        self.port = _free_port()
        supervisor = threading.Thread(
            target=self._supervise, args=(self._exited,), name="amrita-memory-chroma", daemon=True
        )
        supervisor.start()
        if not self._ready.wait(self.start_timeout) or self._failed is not None:
            reason = self._failed or TimeoutError(f"no answer after {self.start_timeout:.0f} s")
            self.stop()
            raise RuntimeError(f"chroma run failed to start: {reason}\n{self.output_tail()}")
        deadline = time.monotonic() + self.start_timeout
        while not self._heartbeat():
            if not self.alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"chroma run did not answer on {self.url}\n{self.output_tail()}")
            time.sleep(0.05)

    def _supervise(self, exited: threading.Event) -> None:
        """Spawn the child and read its output until it exits (this thread is its parent)."""
        env = {**os.environ, "ANONYMIZED_TELEMETRY": "False", "RUST_LOG": "error"}
        command = [
            *chroma_command(), "run", "--path", str(self.path),
            "--host", LOOPBACK, "--port", str(self.port),
        ]  # fmt: skip
        try:
            proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
                preexec_fn=_die_with_parent if can_supervise() else None,
            )
        except OSError as exc:
            self._failed = exc
            exited.set()
            self._ready.set()
            return
        self._proc = proc
        self._ready.set()
        assert proc.stdout is not None
        # Request logging is off, so the output is the banner and errors: cheap to keep.
        for raw in proc.stdout:
            self._tail.append(raw.decode(errors="replace").rstrip())
        code = proc.wait()
        exited.set()
        if not self._stopping:
            logger.warning(
                f"[Memory] 本地 ChromaDB 子进程意外退出（退出码 {code}）：{self.output_tail()[-300:]}"
            )

    def _heartbeat(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/api/v2/heartbeat", timeout=2) as answer:
                return answer.status == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False

    # -- stopping ---------------------------------------------------------------------

    def stop(self, grace: float = STOP_GRACE) -> None:
        """Terminate the server (SIGTERM, SIGKILL after ``grace`` seconds); idempotent."""
        proc, self._proc = self._proc, None
        self._stopping = True
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(grace)
