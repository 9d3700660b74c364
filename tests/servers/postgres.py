"""A throw-away PostgreSQL cluster for the test session.

``initdb`` + ``pg_ctl`` from the system's PostgreSQL (``pg_config --bindir``, else the
newest ``/usr/lib/postgresql/*/bin``), a data directory and a unix socket directory of
their own, listening on 127.0.0.1 on a free port, ``trust`` authentication. PostgreSQL
refuses to run as root: as root every server command runs as the ``postgres`` user
(``runuser``), which then owns the cluster's directories.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

from .chroma_server import free_port

__all__ = ["PostgresServer", "find_bindir"]

USER = "postgres"  # the cluster's superuser (and, as root, the OS user running it)


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", path.parent.name))


def find_bindir() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``; ``None`` when not installed."""
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=30, check=True
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            out = ""
        if out:
            candidates.append(Path(out))
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=_version_key, reverse=True)
    for bindir in candidates:
        if (bindir / "initdb").is_file() and (bindir / "pg_ctl").is_file():
            return bindir
    return None


class PostgresServer:
    """One cluster; :meth:`create_database` gives each user of it a fresh database."""

    host = "127.0.0.1"

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.port = 0
        self._root: Path | None = None
        self._as_root = os.geteuid() == 0

    @property
    def root(self) -> Path:
        assert self._root is not None, "server not started"
        return self._root

    def _cmd(self, *args: str) -> list[str]:
        return ["runuser", "-u", USER, "--", *args] if self._as_root else list(args)

    def _run(self, *args: str, timeout: float = 120) -> str:
        proc = subprocess.run(
            self._cmd(*args), capture_output=True, text=True, timeout=timeout, cwd="/"
        )
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
        return proc.stdout

    def start(self) -> None:
        # The parent must be traversable by the postgres user (mkdtemp makes it 0700).
        self._root = Path(tempfile.mkdtemp(prefix="apm-pg-"))
        self._root.chmod(0o755)
        data, sockets = self._root / "data", self._root / "sockets"
        for path in (data, sockets):
            path.mkdir(mode=0o700)
            if self._as_root:
                shutil.chown(path, USER, USER)
        if self._as_root:
            shutil.chown(self._root, USER, USER)
        self._run(
            str(self.bindir / "initdb"),
            "-D",
            str(data),
            "-U",
            USER,
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        )
        self.port = free_port(self.host)
        # -F: no fsync (a throw-away cluster); the log stays in the data directory.
        options = f"-h {self.host} -p {self.port} -k {sockets} -F -c max_connections=200"
        self._run(
            str(self.bindir / "pg_ctl"),
            "start",
            "-D",
            str(data),
            "-w",
            "-t",
            "60",
            "-l",
            str(data / "server.log"),
            "-o",
            options,
        )

    def stop(self) -> None:
        if self._root is None:
            return
        data = self._root / "data"
        if (data / "postmaster.pid").exists():
            try:
                self._run(str(self.bindir / "pg_ctl"), "stop", "-D", str(data), "-m", "fast")
            except (RuntimeError, subprocess.TimeoutExpired):
                self._run(str(self.bindir / "pg_ctl"), "stop", "-D", str(data), "-m", "immediate")
        shutil.rmtree(self._root, ignore_errors=True)
        self._root = None

    def log(self) -> str:
        """The server's log (for a failing test's message)."""
        path = self.root / "data" / "server.log"
        return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""

    def create_database(self, prefix: str = "apm") -> str:
        """A new empty database; returns its name."""
        name = f"{prefix}_{uuid.uuid4().hex[:10]}"
        self._run(
            str(self.bindir / "createdb"), "-h", self.host, "-p", str(self.port), "-U", USER, name
        )
        return name

    def url(self, database: str) -> str:
        """The SQLAlchemy URL of ``database`` for the asyncpg driver."""
        return f"postgresql+asyncpg://{USER}@{self.host}:{self.port}/{database}"
