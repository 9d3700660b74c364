"""The link between ``ambot memory`` and a running bot: the local token file and its HTTP client.

In local mode the embedded ChromaDB can be opened by one process only, so
while the bot runs a maintenance command cannot open it; it asks the bot
instead, through the plugin's admin API (``/api/memory/...``) on the
loopback address. The bot writes, at start, a random token together with
its address into ``<data_dir>/.console_token.json`` (mode 0600, readable
only by the account that runs the bot) and deletes the file at shutdown; a
request that carries the token in :data:`TOKEN_HEADER` is let in without the
WebUI login. The token is never logged. The file also names the bot's process
(its PID and, on Linux, when that process started), so a file left by a killed
bot is told apart from a running bot that does not answer, even when its PID
was given to another process since (:func:`serving_bot`).

Only the standard library is used (the command must not depend on the bot's
HTTP stack being importable in the same way).
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import secrets
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import ErrorKind, PluginError
from .files import atomic_write_text

__all__ = [
    "TOKEN_FILE_NAME",
    "TOKEN_HEADER",
    "BotEndpoint",
    "BotLinkError",
    "follow_job",
    "loopback_host",
    "process_start",
    "read_token_file",
    "remove_token_file",
    "running_bot",
    "serving_bot",
    "token_matches",
    "write_token_file",
]

TOKEN_FILE_NAME = ".console_token.json"
TOKEN_HEADER = "X-Amrita-Memory-Token"
_FORMAT = "amrita_plugin_memory/console_token"


class BotLinkError(PluginError, RuntimeError):
    """The running bot could not be asked; the message is meant for the operator."""

    kind = ErrorKind.FAILED


def loopback_host(host: str) -> str:
    """The address to reach a server bound to ``host`` from this machine.

    A wildcard bind (``0.0.0.0`` / ``::``) is reached on the loopback address
    of its family; a specific address is used as it is.
    """
    host = host.strip().strip("[]")
    if host in ("", "0.0.0.0", "localhost"):
        return "127.0.0.1"
    if host == "::":
        return "::1"
    return host


def process_start(pid: int) -> str | None:
    """When process ``pid`` started, as ``<boot id>:<clock ticks since boot>`` (Linux);
    ``None`` where this cannot be read (another system, the process is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
        boot = Path("/proc/sys/kernel/random/boot_id").read_text(encoding="utf-8").strip()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()  # the name in parentheses may hold spaces
    return f"{boot}:{fields[19]}" if len(fields) > 19 else None


@dataclass(frozen=True, slots=True)
class BotEndpoint:
    """Where the running bot's admin API answers, and the token that opens it."""

    token: str
    host: str
    port: int
    pid: int
    started: str | None = None
    """:func:`process_start` of the bot's process when it wrote the file (``None``: unknown)."""

    @property
    def base_url(self) -> str:
        host = loopback_host(self.host)
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    def __repr__(self) -> str:  # never show the token (tracebacks, debug logs)
        return f"BotEndpoint(host={self.host!r}, port={self.port}, pid={self.pid})"

    def request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        timeout: float = 60.0,
    ) -> dict[str, Any]:
        """Call ``path`` of the admin API; the ``data`` of a successful answer.

        Every failure (refused connection, timeout, an error answer) raises
        :class:`BotLinkError` with the API's own Chinese message when there
        is one.
        """
        data = None if body is None else json.dumps(body).encode("utf-8")
        req = urllib.request.Request(
            self.base_url + path,
            data=data,
            method=method,
            headers={TOKEN_HEADER: self.token, "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                payload = json.loads(resp.read().decode("utf-8"))
        except urllib.error.HTTPError as exc:
            raise BotLinkError(_error_message(exc)) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise BotLinkError(
                f"无法连接运行中的 Bot（PID {self.pid}）的管理接口 {self.base_url}：{reason}"
            ) from None
        except ValueError:
            raise BotLinkError(f"Bot 的管理接口 {self.base_url} 返回了无法解析的内容") from None
        if not isinstance(payload, dict) or not payload.get("success"):
            message = payload.get("message") if isinstance(payload, dict) else None
            raise BotLinkError(str(message or "Bot 的管理接口返回了错误"))
        result = payload.get("data")
        return result if isinstance(result, dict) else {"value": result}


def _error_message(exc: urllib.error.HTTPError) -> str:
    try:
        payload = json.loads(exc.read().decode("utf-8"))
    except (OSError, ValueError):
        payload = None
    if isinstance(payload, dict) and payload.get("message"):
        return str(payload["message"])
    return f"Bot 的管理接口返回 HTTP {exc.code}"


def write_token_file(data_dir: Path, host: str, port: int) -> BotEndpoint:
    """Create a new random token and write it with the address (mode 0600, atomic)."""
    pid = os.getpid()
    endpoint = BotEndpoint(secrets.token_urlsafe(32), host, int(port), pid, process_start(pid))
    document = {
        "format": _FORMAT,
        "token": endpoint.token,
        "host": host,
        "port": endpoint.port,
        "pid": endpoint.pid,
        "started": endpoint.started,
    }
    atomic_write_text(data_dir / TOKEN_FILE_NAME, json.dumps(document), mode=0o600)
    return endpoint


def read_token_file(data_dir: Path) -> BotEndpoint | None:
    """The endpoint in the token file; ``None`` when it is missing or unusable."""
    try:
        document = json.loads((data_dir / TOKEN_FILE_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(document, dict) or document.get("format") != _FORMAT:
        return None
    token, host = document.get("token"), document.get("host")
    port, pid = document.get("port"), document.get("pid")
    if not (isinstance(token, str) and token and isinstance(host, str)):
        return None
    if not (isinstance(port, int) and 0 < port < 65536 and isinstance(pid, int) and pid > 0):
        return None
    started = document.get("started")
    return BotEndpoint(token, host, port, pid, started if isinstance(started, str) else None)


def remove_token_file(data_dir: Path, token: str) -> None:
    """Delete the token file if it still holds ``token`` (never another bot's file)."""
    current = read_token_file(data_dir)
    if current is not None and token_matches(current.token, token):
        with contextlib.suppress(FileNotFoundError):
            (data_dir / TOKEN_FILE_NAME).unlink()


def token_matches(expected: str, given: str | None) -> bool:
    """Constant-time comparison (no timing side channel on the token)."""
    if not given:
        return False
    return hmac.compare_digest(expected.encode("utf-8"), given.encode("utf-8"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another account
        return True
    return True


def running_bot(data_dir: Path, lock_file: Path) -> BotEndpoint | None:
    """The running bot that holds the local data directory and published a token.

    ``lock_file`` is the embedded ChromaDB's lock file, which holds the PID of
    the process that locked it last. The token file counts only when its PID
    is alive and is that PID (a file left by a killed bot is ignored).
    """
    endpoint = read_token_file(data_dir)
    if endpoint is None or not _alive(endpoint.pid):
        return None
    try:
        holder = lock_file.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None
    return endpoint if holder == str(endpoint.pid) else None


def _is_the_bot(endpoint: BotEndpoint) -> bool:
    """Whether the file's process still runs: its PID is alive and, where the file
    names when that process started, it is the same process (not a reused PID)."""
    if not _alive(endpoint.pid):
        return False
    if endpoint.started is None:
        return True  # cannot tell: count it as running (the safe side)
    now = process_start(endpoint.pid)
    return now is None or now == endpoint.started


def serving_bot(data_dir: Path, *, timeout: float = 3.0) -> BotEndpoint | None:
    """The running bot that published a token in ``data_dir`` and listens at its address.

    Remote mode has no lock file that names the bot (:func:`running_bot`).
    ``None`` (do the work here) when there is no token file, or when the process
    that wrote it is gone (its PID is not alive, or now belongs to a process
    started later: what a killed bot leaves). When that process still runs but
    its address refuses the connection, :class:`BotLinkError`: a command doing
    the work itself would race the bot's in-memory state (its locks, its
    caches, the L3 loop), so it must not.
    """
    endpoint = read_token_file(data_dir)
    if endpoint is None or not _is_the_bot(endpoint):
        return None
    try:
        with socket.create_connection((loopback_host(endpoint.host), endpoint.port), timeout):
            return endpoint
    except OSError as exc:
        raise BotLinkError(
            f"Bot 正在运行（PID {endpoint.pid}），但它的管理接口 {endpoint.base_url} 无法连接"
            f"（{exc.__class__.__name__}）；为免与它内存中的状态冲突，本命令不会自行读写数据。"
            f"请检查 Bot 的状态后重试；若确认 Bot 已经停止，删除 {data_dir / TOKEN_FILE_NAME} 后重试"
        ) from None


def follow_job(
    endpoint: BotEndpoint,
    job: dict[str, Any],
    on_progress: Callable[[int, int], None],
    *,
    interval: float = 0.5,
) -> dict[str, Any]:
    """Poll the bot's current maintenance job until it ends; its final state."""
    job_id = job.get("id")
    while True:
        current = endpoint.request("GET", "/api/memory/jobs/current").get("job") or {}
        if current.get("id") != job_id:
            raise BotLinkError("Bot 上的维护任务已不存在（Bot 可能已重启），请用 status 查看结果")
        done, total = current.get("done"), current.get("total")
        if isinstance(done, int) and isinstance(total, int) and total > 0:
            on_progress(done, total)
        if current.get("state") != "running":
            return current
        time.sleep(interval)
