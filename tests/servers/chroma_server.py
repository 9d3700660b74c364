"""A real ``chroma run`` server in a subprocess.

Running the genuine server (rather than an in-process client) exercises the plugin's
HTTP client path and lets tests kill/restart the vector store like a real deployment.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import weakref
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Protocol, Self, cast

if TYPE_CHECKING:
    from chromadb.api.client import Client


class ChromaEndpoint(Protocol):
    """Where a runtime finds its Chroma server: the server itself or a proxy in front of it."""

    @property
    def host(self) -> str: ...

    @property
    def port(self) -> int: ...


def free_port(host: str = "127.0.0.1") -> int:
    """Ask the OS for a currently unused TCP port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _terminate(proc: subprocess.Popen[bytes]) -> None:
    """Terminate ``proc``, killing it if it has not exited after 10 s."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _chroma_executable() -> Path:
    """The ``chroma`` CLI installed next to the running interpreter (the venv's)."""
    exe = Path(sys.executable).parent / ("chroma.exe" if os.name == "nt" else "chroma")
    if not exe.exists():
        raise FileNotFoundError(f"chroma executable not found at {exe}")
    return exe


class ChromaServer:
    """``chroma run --path PATH --host 127.0.0.1 --port PORT`` as a managed subprocess.

    With ``port=0`` a free port is chosen once and kept, so restarts come back on the
    same address and existing clients reconnect.  Output goes to a log file next to
    ``path`` whose tail is included in start-up errors.
    """

    host = "127.0.0.1"

    def __init__(self, path: str | Path, *, port: int = 0) -> None:
        self.path = Path(path)
        self.port = port or free_port(self.host)
        self.log_path = self.path.parent / f"{self.path.name}.chroma.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize[..., ChromaServer] | None = None

    @property
    def url(self) -> str:
        """Base URL of the server, e.g. ``http://127.0.0.1:PORT``."""
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        """Whether the subprocess is alive."""
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout: float = 60) -> None:
        """Spawn the server and block until ``/api/v2/heartbeat`` answers 200."""
        if self.running:
            return
        self.path.mkdir(parents=True, exist_ok=True)
        command = [
            str(_chroma_executable()),
            "run",
            "--path",
            str(self.path),
            "--host",
            self.host,
            "--port",
            str(self.port),
        ]
        env = {**os.environ, "ANONYMIZED_TELEMETRY": "False"}
        with self.log_path.open("ab") as log:
            log.write(f"\n=== {' '.join(command)}\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
            )
        # Never leak a server: terminate it at interpreter exit even if stop() is skipped.
        self._finalizer = weakref.finalize(self, _terminate, self._proc)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                code = self._proc.returncode
                self.stop()
                raise RuntimeError(f"chroma exited with {code}:\n{self.log_tail()}")
            if self._heartbeat():
                return
            time.sleep(0.1)
        self.stop()
        raise TimeoutError(f"chroma not ready after {timeout}s:\n{self.log_tail()}")

    def stop(self) -> None:
        """Terminate the server (kill after 10 s).  Idempotent."""
        finalizer, self._finalizer, self._proc = self._finalizer, None, None
        if finalizer is not None:
            finalizer()

    def restart(self) -> None:
        """Stop and start again on the same port and path."""
        self.stop()
        self.start()

    def client(self) -> Client:
        """A ``chromadb.HttpClient`` for this server (telemetry off).

        Typed as the concrete ``Client`` (what HttpClient really returns) so that tests
        can use it as a context manager and close it.
        """
        import chromadb
        from chromadb.config import Settings

        client = chromadb.HttpClient(
            host=self.host, port=self.port, settings=Settings(anonymized_telemetry=False)
        )
        return cast("Client", client)

    def log_tail(self, lines: int = 40) -> str:
        """Last lines of the server log (for error messages)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "<no log>"
        return "\n".join(text.splitlines()[-lines:])

    def _heartbeat(self) -> bool:
        # Bypass any *_PROXY environment: the server is always local.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(f"{self.url}/api/v2/heartbeat", timeout=1) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False

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
