"""A real bot process with the WebUI and the memory console, for the console tests.

:class:`RunningBot` starts ``ambot run`` in a :class:`~tests.botproject.BotProject`
(local ChromaDB, the session's embedding server, a WebUI password set), waits
for the web server, and stops it again. Its log goes to ``bot.log`` in the
project, so tests can read what the bot logged. :func:`login` logs an
``httpx`` client in through the WebUI's real ``/api/auth/login``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sqlite3
import subprocess
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import httpx

from tests.botproject import VENV_BIN, BotProject, seed, snapshot
from tests.conftest import EMBED
from tests.reliability_stats import STATS
from tests.servers import free_port

__all__ = [
    "PASSWORD",
    "USER",
    "RunningBot",
    "assert_nothing_lost",
    "login",
    "run_async",
    "seed_episodes",
    "seeded_bot",
    "start_seeded",
    "stored_memories",
]

T = TypeVar("T")

USER = "admin"
PASSWORD = "console-test-Pw-7d41"

CONFIG_TOML = """\
[subconscious]
enabled = true
target_user_id = "10001"
enable_knowledge = true
"""


def _no_sweep_of_its_own(config: Path) -> None:
    """Turn the bot's periodic archive sweep off unless the test configures ``[archive]`` itself.

    Seeded memories carry old clocks: a sweep starting by itself a few minutes
    after start-up would move them in the middle of a test.
    """
    text = config.read_text(encoding="utf-8") if config.exists() else ""
    if not re.search(r"^\[archive\]", text, re.M):
        disabled = f"{text.rstrip()}\n\n[archive]\nenabled = false\n".lstrip()
        config.write_text(disabled, encoding="utf-8")


class RunningBot:
    """``ambot run`` in ``project`` with the WebUI on 127.0.0.1 (one per test module)."""

    def __init__(self, project: BotProject, *, l3: bool = True, **env: Any) -> None:
        self.project = project
        self.port = free_port()
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        config = project.root / "config" / "amrita_plugin_memory" / "config.toml"
        config.parent.mkdir(parents=True, exist_ok=True)
        if l3:
            config.write_text(CONFIG_TOML, encoding="utf-8")
        _no_sweep_of_its_own(config)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.project.root / "bot.log"

    def log(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def start(self, timeout: float = 120) -> None:
        """Start the bot; returns once its web server listens.

        The port was free when it was chosen, but the ephemeral range is shared with every
        client socket of a busy test session: a bot whose bind failed ("address already in
        use", logged after "Application startup complete") gets another port, twice at most.
        """
        for attempt in range(3):
            if self._start_once(timeout):
                return
            if attempt < 2:
                self.port = free_port()
        raise RuntimeError(f"the bot found no free port:\n{self.log()[-4000:]}")

    def _start_once(self, timeout: float) -> bool:
        """``False``: its port was taken meanwhile (nothing else went wrong)."""
        self.project.write_env(
            **{
                **self.project.env,
                "HOST": "127.0.0.1",
                "PORT": self.port,
                "LOG_LEVEL": "INFO",
                "WEBUI_PASSWORD": PASSWORD,
                **self.env,
            }
        )
        with self.log_path.open("wb") as out:
            self.proc = subprocess.Popen(
                [str(VENV_BIN / "ambot"), "run"],
                cwd=self.project.root,
                env=self.project.process_env(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, as under a terminal
            )
        deadline = time.monotonic() + timeout
        while "Uvicorn running on" not in self.log():  # logged once the port is bound
            if self.proc.poll() is not None or time.monotonic() > deadline:
                log = self.log()
                self.stop()
                if "address already in use" in log.lower():
                    return False
                raise RuntimeError(f"the bot did not start:\n{log[-4000:]}")
            time.sleep(0.2)
        return True

    def stop(self) -> int | None:
        """Stop the bot (SIGTERM, a graceful NoneBot shutdown); its exit code."""
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        proc.terminate()
        try:
            return proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
            return None


def start_seeded(
    project: BotProject, fill: Callable[[Any], Awaitable[None]], **env: Any
) -> RunningBot:
    """Fill the project's store with ``fill(runtime)``, record the fingerprint and the key
    format (as a bot that wrote them would have), then start the bot."""
    from amrita_plugin_memory.embedding import reset_fingerprint
    from amrita_plugin_memory.upkeep.rekey import migrate_partition_keys

    async def prepare() -> None:
        rt = project.runtime()
        try:
            await fill(rt)
            await reset_fingerprint(rt.maintenance)
            await migrate_partition_keys(rt.store)
        finally:
            await rt.close()

    EMBED.reset()
    run_async(prepare())
    running = RunningBot(project, **env)
    running.start()
    return running


def login(client: httpx.Client, password: str = PASSWORD) -> httpx.Response:
    """Log ``client`` in through the WebUI (its cookie then authenticates every request)."""
    return client.post("/api/auth/login", json={"username": USER, "password": password})


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to the end on a fresh event loop in a worker thread, from a sync test.

    Not ``asyncio.run`` in the test's own thread: that would leave the thread
    without a current event loop, which the session's asyncio tests rely on.
    """
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


@contextlib.contextmanager
def webui_session(bot: RunningBot, timeout: float = 60) -> Iterator[httpx.Client]:
    """One logged-in WebUI client for a module's tests (a login costs a bcrypt check)."""
    with httpx.Client(base_url=bot.url, timeout=timeout) as client:
        assert login(client).json()["success"]
        yield client


def api_data(resp: httpx.Response, status: int = 200) -> Any:
    """The ``data`` of an admin API answer that must have ``status``."""
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert body["success"] is (status < 400), body
    return body["data"]


def api_error(resp: httpx.Response, status: int) -> str:
    """The message of an admin API refusal with ``status`` (a hostile input, counted)."""
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert body["success"] is False and body["code"] == status, body
    assert "Traceback" not in resp.text
    STATS.inputs_tried += 1
    return body["message"]


def seeded_bot(
    project: BotProject,
    items: Sequence[tuple[str, str | None, Mapping[str, Any] | None]],
    *,
    l3: bool = True,
    then: Callable[[Any], Awaitable[None]] | None = None,
) -> RunningBot:
    """A started bot whose memory collection holds ``items`` (through :func:`start_seeded`:
    fingerprint written, keys migrated, so it starts without a remap); stop it with
    :meth:`RunningBot.stop`. ``then(runtime)`` adds more (archive rows, versions) after the items."""

    async def fill(rt: Any) -> None:
        await seed(rt, rt.store.name, items)
        if then is not None:
            await then(rt)

    return start_seeded(project, fill, l3=l3)


def stored_memories(project: BotProject) -> tuple[dict[str, Any], dict[str, Any]]:
    """The project's live and archived memories ``{id: (text, metadata)}`` (the bot stopped)."""

    async def read() -> tuple[dict[str, Any], dict[str, Any]]:
        rt = project.runtime()
        try:
            return await snapshot(rt, rt.store.name), await snapshot(rt, rt.store.archive.name)
        finally:
            await rt.close()

    return run_async(read())


def assert_nothing_lost(
    project: BotProject, items: Sequence[tuple[str, str | None, Any]]
) -> dict[str, tuple[str | None, dict[str, Any] | None]]:
    """Every text of ``items`` is still in the project's store, live or archived (the
    bot stopped; losses are counted); the live memories ``{id: (text, metadata)}``."""
    live, archived = stored_memories(project)
    texts = {doc for doc, _ in live.values()} | {doc for doc, _ in archived.values()}
    lost = [i for i, doc, _ in items if doc not in texts]
    STATS.items_lost += len(lost)
    assert lost == []
    return live


def seed_episodes(project: BotProject, episodes: Sequence[Mapping[str, Any]]) -> None:
    """Episodes written into a started bot's SQLite database as its episode store keeps them
    (its tables are made at its start-up): ``id``, ``chat``, ``origin``, ``start`` and
    ``end`` (epoch seconds), ``summary``, optional ``topics``, ``source``, ``participants``."""
    db = project.root / "data" / "nonebot_plugin_orm" / "db.sqlite3"
    columns = (
        "id, chat, origin, start_us, end_us, day, participants, summary, topics, source, "
        "messages, chars, archived_us, archive_reason"
    )
    with contextlib.closing(sqlite3.connect(db)) as conn:
        for e in episodes:
            people = list(e.get("participants", ()))
            conn.execute(
                f"INSERT INTO amrita_plugin_memory_episode ({columns}) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,NULL,'')",
                (
                    e["id"], e["chat"], e["origin"], int(e["start"] * 1e6), int(e["end"] * 1e6),
                    "", json.dumps(people), e["summary"], json.dumps(list(e.get("topics", ()))),
                    e.get("source", "model"), 4, 60,
                ),
            )  # fmt: skip
            conn.executemany(
                "INSERT INTO amrita_plugin_memory_episode_member VALUES (?,?)",
                [(e["id"], p) for p in people],
            )
        conn.commit()
