"""A real bot on earlier days: ``ambot run`` with its clock set back by libfaketime.

The clock: libfaketime (the ``libfaketime`` dev dependency bundles the compiled
``libfaketime.so.1``) as an ``LD_PRELOAD`` of the bot process and its children,
following a moment file (``FAKETIME_TIMESTAMP_FILE`` holding an offset from the
real clock, ``-4471976.263514``): the wall clock (``time.time()``, ``datetime.now()``)
is set back to the chosen moment and runs on at real speed, while the monotonic
clock stays real
(``FAKETIME_DONT_FAKE_MONOTONIC=1``): asyncio's timers, timeouts and sleeps run in
real time, so nothing waits for days. File times are not faked
(``NO_FAKE_STAT=1``): Python would take every ``.pyc`` for stale. The process
runs in ``TZ=UTC`` (a bot on a UTC server); the day it lives is the owner's
(``[memory] timezone``), which is the point of the tests.

:class:`FaketimeBot` is one bot project (one data directory, kept across
restarts): :meth:`FaketimeBot.start` starts it on a chosen moment,
:meth:`FaketimeBot.travel` moves the running bot to a later moment (a bot that
stayed up; libfaketime reads the file again within two seconds, and the harness
waits until the bot's own HTTP ``Date`` header shows the new moment), and it is
driven through a OneBot V11 reverse WebSocket whose events carry the time of the
same faked clock (:class:`FakedClock`). Its chat model is the session's scripted
chat server (``tests/servers/chat_server.py``).
"""

from __future__ import annotations

import contextlib
import platform
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import httpx

from tests.botproject import BotProject
from tests.console_bot import RunningBot
from tests.scale_out_bots import OneBotLink, chat_config, connect_onebot
from tests.servers import ChatServer

__all__ = ["FakedClock", "FaketimeBot", "faked_env", "faketime_library", "write_moment"]


def faketime_library() -> Path:
    """The ``libfaketime.so.1`` the ``libfaketime`` package ships (x86-64 Linux only)."""
    if sys.platform != "linux" or platform.machine() != "x86_64":
        raise RuntimeError(
            f"libfaketime 的 wheel 只带 x86-64 Linux 的库，这里是 {platform.machine()}"
        )
    import libfaketime  # the dev dependency; only its bundled library is used

    path = Path(libfaketime.__file__).parent / "vendor" / "libfaketime" / "src" / "libfaketime.so.1"
    if not path.is_file():
        raise RuntimeError(f"libfaketime.so.1 not found at {path}")
    return path


def faked_env(moment_file: Path) -> dict[str, str]:
    """The environment that makes a process's wall clock follow ``moment_file`` (see
    :func:`write_moment`), the monotonic clock real."""
    return {
        "LD_PRELOAD": str(faketime_library()),
        "FAKETIME_TIMESTAMP_FILE": str(moment_file),
        # Read again every second or two: a running process follows a new moment.
        "FAKETIME_CACHE_DURATION": "1",
        "TZ": "UTC",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "NO_FAKE_STAT": "1",
    }


def write_moment(moment_file: Path, moment: datetime) -> FakedClock:
    """Set the clock of every process following ``moment_file`` to ``moment`` (aware) from
    now on: an offset from the real clock, so a process that reads the file a second later
    shows the same time as the returned clock, running on at real speed. Replaced whole,
    so a process never reads half a line."""
    if moment.tzinfo is None:
        raise ValueError("moment must be aware")
    clock = FakedClock(moment.timestamp() - time.time())
    partial = moment_file.with_suffix(".partial")
    partial.write_text(f"{clock.offset:+f}\n", encoding="ascii")
    partial.replace(moment_file)
    return clock


@dataclass(frozen=True)
class FakedClock:
    """The faked wall clock: the real one moved by ``offset`` seconds, as libfaketime moves
    the bot's (once the bot has read the moment file, its clock and this one agree)."""

    offset: float

    def timestamp(self) -> float:
        """The faked time as a POSIX timestamp (the ``time`` of a OneBot event)."""
        return time.time() + self.offset

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.timestamp(), UTC)


class _FakedProject(BotProject):
    """A bot project whose ``ambot`` processes run under libfaketime once a moment is set."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.faked: dict[str, str] = {}

    def process_env(self) -> dict[str, str]:
        return {**super().process_env(), **self.faked}


class FaketimeBot:
    """One ``ambot run`` project on one data directory, living on chosen days.

    ``plugin_config``: the plugin's ``config.toml`` (``[archive]`` is turned off
    unless it names it: a sweep of its own would move memories mid-test).
    ``env``: more ``.env`` keys (the embedder's). The chat model is ``chat``.
    """

    def __init__(self, root: Path, chat: ChatServer, *, plugin_config: str, **env: Any) -> None:
        self.project = _FakedProject(root)
        chat_config(root, chat.base_url)
        config = root / "config" / "amrita_plugin_memory" / "config.toml"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(plugin_config, encoding="utf-8")
        self.project.write_env(**env)
        self.moment_file = root / "faketime.moment"
        self.running = RunningBot(self.project, l3=False)
        self.clock: FakedClock | None = None
        self.start_seconds: list[float] = []
        """How long each start took (real seconds, until the bot's web server was up)."""

    def start(self, moment: datetime, timeout: float = 300) -> FakedClock:
        """Start the bot with its wall clock at ``moment`` (aware, any zone); returns once it
        serves (``timeout``: a hang guard on a busy machine). The previous run must be over."""
        if self.running.proc is not None:
            raise RuntimeError("the bot is already running")
        self.clock = write_moment(self.moment_file, moment)
        self.project.faked = faked_env(self.moment_file)
        started = time.monotonic()
        self.running.start(timeout)
        self.start_seconds.append(time.monotonic() - started)
        return self.clock

    def travel(self, moment: datetime, timeout: float = 30) -> FakedClock:
        """Move the running bot's clock forward to ``moment``; returns once the bot's own
        clock shows it (its HTTP ``Date`` header, whole seconds)."""
        if self.running.proc is None or self.clock is None:
            raise RuntimeError("the bot is not running")
        if moment <= self.clock.now():
            raise ValueError("the clock only moves forward")
        self.clock = write_moment(self.moment_file, moment)
        floor = moment.replace(microsecond=0)
        deadline = time.monotonic() + timeout  # a hang guard, not a measurement
        with httpx.Client(base_url=self.running.url, timeout=10) as client:
            while (shown := self._date_shown(client)) is None or shown < floor:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the bot's clock shows {shown}, not {moment}")
                time.sleep(0.1)
        return self.clock

    @staticmethod
    def _date_shown(client: httpx.Client) -> datetime | None:
        """The bot's clock as its web server's ``Date`` header shows it."""
        header = client.get("/").headers.get("date")
        return parsedate_to_datetime(header) if header else None

    def stop(self) -> int | None:
        """Stop the bot (SIGTERM, a graceful shutdown); its exit code."""
        self.clock = None
        return self.running.stop()

    def log(self) -> str:
        return self.running.log()

    @contextlib.asynccontextmanager
    async def onebot(self, friends: set[int]) -> AsyncIterator[OneBotLink]:
        """A OneBot V11 implementation connected to the running bot; its events' ``time`` is
        the bot's faked clock."""
        if self.clock is None:
            raise RuntimeError("the bot is not running")
        url = f"ws://127.0.0.1:{self.running.port}/onebot/v11/ws"

        def now() -> float:
            assert self.clock is not None, "the bot was stopped"
            return self.clock.timestamp()

        async with connect_onebot(url, friends, now) as link:
            yield link
