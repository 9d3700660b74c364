"""The local ChromaDB in a child process: ``chroma run`` on 127.0.0.1, owned by the bot.

Why: the embedded ChromaDB's Rust bindings hold the GIL for the whole of a
write (chromadb releases it for reads only), so a write running in a worker
thread still stalls the event loop: an archive sweep of 100,000 memories
stalled chat turns for up to half a second, and a write that makes Chroma
persist a large vector index does the same to every chat. Served from a child
process, the same data directory (same on-disk format) is written by the
server while the bot's worker thread only waits on a socket, GIL released.

Lifetime: :class:`LocalChromaServer` starts the server (a free loopback port,
request logging off) from a supervisor thread that lives as long as the child.
The child's first act, before it imports chromadb, is to ask Linux
(``PR_SET_PDEATHSIG``) to be killed when that thread, i.e. the bot, dies: a
``kill -9`` of the bot never leaves a server writing the data directory
behind. That happens in the child's own interpreter (:data:`CHILD_MAIN`), not
in a ``preexec_fn``: code run between ``fork`` and ``exec`` of a
multi-threaded process (the bot) may deadlock on a lock another thread held
at the fork. The child runs in its own session, so a Ctrl+C in the bot's
terminal reaches the bot only, and the bot stops the server after its other
shutdown work (:meth:`stop`: SIGTERM, then SIGKILL after a grace period).
The data directory lock of :class:`~.connection.ChromaConnection` is held by the
bot for as long as the server may run, so a maintenance command never opens
the directory meanwhile.

Whose server: the port is chosen free, then bound by the child, so another
process may take it in between. Once the server answers, :meth:`start`
checks (psutil) that the socket listening on that port belongs to the
child, and refuses otherwise (a clear error, never someone else's database);
while the child lives nobody else can listen there. What this does **not**
give: ``chroma run`` (chromadb 1.5) has no authentication (its Rust server
ignores ``CHROMA_SERVER_AUTHN_*``), so while the bot runs, any local account
that finds the loopback port can read and write the store (see README).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from pathlib import Path

import psutil
from nonebot.log import logger

from ...core.errors import ErrorKind, PluginError

__all__ = ["CHILD_MAIN", "LocalChromaServer", "PortTaken", "can_supervise", "listens_on"]

LOOPBACK = "127.0.0.1"
START_TIMEOUT = 60.0
STOP_GRACE = 10.0
_TAIL_LINES = 40

CHILD_MAIN = """\
import os, sys
bot = int(sys.argv.pop(1))
if sys.platform.startswith("linux"):
    import ctypes
    PR_SET_PDEATHSIG, SIGKILL = 1, 9
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0:
        sys.exit("prctl(PR_SET_PDEATHSIG) failed: errno %d" % ctypes.get_errno())
if os.getppid() != bot:
    sys.exit("the bot exited before its chroma server started")
from chromadb.cli.cli import app
app()
"""
"""The child's program (``python -c``; argv: the bot's pid, then ``chroma``'s own).

It runs single-threaded in the fresh interpreter, so calling ``prctl``
through ctypes is safe there. The signal fires when the thread that forked
the child exits; if the bot died before ``prctl`` ran, the child has already
been re-parented and stops at once instead of serving. (Elsewhere than
Linux there is no such signal: see :func:`can_supervise`.)
"""


class PortTaken(PluginError, RuntimeError):
    """The server's port is served by another process (refused, never used)."""

    kind = ErrorKind.STORE


def can_supervise() -> bool:
    """Whether a child server dies with the bot here (Linux ``PR_SET_PDEATHSIG``).

    Elsewhere a bot that crashed could leave a server writing the data
    directory, and the next start would open a second one: not worth it.
    """
    return sys.platform.startswith("linux")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def listens_on(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds the socket listening on ``127.0.0.1:port``.

    ``chroma run`` does not share its address (no ``SO_REUSEPORT``), so while
    it listens there nobody else can.
    """
    try:
        sockets = psutil.Process(pid).net_connections(kind="tcp4")
    except (psutil.Error, OSError):
        return False
    return any(
        c.status == psutil.CONN_LISTEN and tuple(c.laddr) == (LOOPBACK, port) for c in sockets
    )


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
        self._exited = threading.Event()
        self._stopping = threading.Event()
        """Set by :meth:`stop` for the child it stops (one per child, like ``_exited``):
        its exit is then expected and not reported."""

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
        # One of each per child: an old supervisor keeps its own.
        self._exited = threading.Event()
        self._stopping = threading.Event()
        self._failed = None
        self.port = _free_port()
        supervisor = threading.Thread(
            target=self._supervise,
            args=(self._exited, self._stopping),
            name="amrita-memory-chroma",
            daemon=True,
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
        self._check_owner()

    def _check_owner(self) -> None:
        """Refuse a server that answers on our port but is not our child."""
        pid = self.pid
        if pid is not None and self.alive() and listens_on(pid, self.port):
            return
        self.stop()
        raise PortTaken(
            f"端口 {self.url} 由另一个进程监听，不是本插件启动的 chroma run（PID {pid}）："
            "为免连到别人的数据库，未使用它；下次操作会换一个端口重新启动"
        )

    def _supervise(self, exited: threading.Event, stopping: threading.Event) -> None:
        """Spawn the child and read its output until it exits (this thread is its parent)."""
        env = {**os.environ, "ANONYMIZED_TELEMETRY": "False", "RUST_LOG": "error"}
        command = [
            sys.executable, "-c", CHILD_MAIN, str(os.getpid()),
            "run", "--path", str(self.path), "--host", LOOPBACK, "--port", str(self.port),
        ]  # fmt: skip
        try:
            proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # the terminal's Ctrl+C is for the bot, not for it
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
        if not stopping.is_set():
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
        self._stopping.set()
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(grace)
