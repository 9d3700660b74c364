"""Test bed: a real NoneBot + OneBot V11 + Amrita stack with local protocol servers.

Before NoneBot starts, this file starts on 127.0.0.1:
  * an embedding server speaking the Ollama and OpenAI protocols,
  * an OpenAI-compatible chat server whose replies tests script,
and writes a minimal Amrita chat configuration pointing at them into a
temporary bot project (the working directory of the whole session). A real
``chroma run`` server is started on first use for the remote-mode tests.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import nonebug
import pytest

# Amrita's webui runs `uv --version` at import time (pitfall P1).
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"

from tests.quick_tier import ProcessGuard, mark_tiers
from tests.servers import ChatServer, ChromaEndpoint, ChromaProxy, ChromaServer, EmbeddingServer
from tests.servers.postgres import PostgresServer, find_bindir

ROOT = Path(__file__).resolve().parent.parent
WORK = Path(tempfile.mkdtemp(prefix="apm-test-"))
EMBED = EmbeddingServer()
CHAT = ChatServer()
EMBED_MODEL = "nomic-embed-text:latest"
SUPERUSER = "99999"


def _write_bot_project(work: Path, chat_base_url: str) -> None:
    # The session's bot keeps its sweep job (tests look at it) but never runs
    # it by itself: seeded memories carry old clocks, and a sweep in the
    # middle of another test would move them. Active memory is switched on
    # by the tests of it (``tests/active_helpers.active``): elsewhere its
    # extraction requests and <MEMORIES> blocks would change what other
    # tests count in the chat server's requests.
    plugin_config = work / "config" / "amrita_plugin_memory" / "config.toml"
    plugin_config.parent.mkdir(parents=True, exist_ok=True)
    plugin_config.write_text(
        "[archive]\nfirst_sweep_delay_minutes = 100000\n\n[active_memory]\nenabled = false\n",
        encoding="utf-8",
    )
    chat_dir = work / "config" / "chat"
    (chat_dir / "models").mkdir(parents=True, exist_ok=True)
    (chat_dir / "config.toml").write_text("enable = true\n", encoding="utf-8")
    (chat_dir / "models" / "default.json").write_text(
        json.dumps(
            {
                "name": "default",
                "model": "mock-model",
                "base_url": chat_base_url,
                "api_key": "sk-test",
            }
        ),
        encoding="utf-8",
    )


def _session_process(command: Sequence[str]) -> bool:
    """The child ``chroma run`` serving the session bot's local store (under ``WORK/data``),
    started by whichever test first uses it."""
    at = command.index("--path") + 1 if "--path" in command else len(command)
    return at < len(command) and command[at].startswith(str(WORK / "data"))


GUARD = ProcessGuard(_session_process)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "quick: starts no process (the quick tier: pytest -m quick; tests/quick_tier.py)"
    )
    config.addinivalue_line("markers", "process: starts a bot or a server (not in the quick tier)")
    GUARD.install()
    config.pluginmanager.register(GUARD, "process-guard")  # sees session fixtures too
    EMBED.start()
    CHAT.start()
    _write_bot_project(WORK, CHAT.base_url)
    config.stash[nonebug.NONEBOT_INIT_KWARGS] = {
        "driver": "~fastapi",
        "log_level": "INFO",
        "localstore_use_cwd": True,
        "localstore_config_dir": str(WORK / "config"),
        "localstore_data_dir": str(WORK / "data"),
        "localstore_cache_dir": str(WORK / "cache"),
        "alembic_startup_check": False,
        "sqlalchemy_database_url": f"sqlite+aiosqlite:///{WORK / 'db.sqlite3'}",
        "superusers": {SUPERUSER},
        "embedding_model_url": EMBED.url,
        "embedding_model_name": "auto",
        "embedding_proctol": "ollama-embed",
        "embedding_timeout_seconds": 5,
        "embed_mismatch_policy": "never",
    }


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_tiers(items)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    with GUARD.running(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with GUARD.running(item):
        result = yield
    GUARD.check(item)
    return result


def pytest_unconfigure(config: pytest.Config) -> None:
    CHAT.stop()
    EMBED.stop()
    os.chdir(ROOT)
    shutil.rmtree(WORK, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
async def after_nonebot_init(after_nonebot_init: None) -> None:
    import nonebot
    from nonebot.adapters.onebot.v11 import Adapter

    nonebot.get_driver().register_adapter(Adapter)
    os.chdir(WORK)
    nonebot.load_plugin("amrita_plugin_memory")


# ---------------------------------------------------------------------------
# Servers
# ---------------------------------------------------------------------------


@pytest.fixture
def embed_server() -> Iterator[EmbeddingServer]:
    EMBED.reset()
    yield EMBED
    EMBED.reset()


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    CHAT.clear()
    yield CHAT
    CHAT.clear()


@pytest.fixture(scope="session")
def chroma_server() -> Iterator[ChromaServer]:
    server = ChromaServer(WORK / "chroma-server")
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A throw-away PostgreSQL cluster, started on first use, stopped at the session's end.

    Without PostgreSQL's server binaries the test is skipped, but fails under CI
    (``CI`` set: ``.ci/run`` installs them)."""
    bindir = find_bindir()
    if bindir is None:
        reason = (
            "PostgreSQL server binaries not found (pg_config --bindir, "
            "/usr/lib/postgresql/*/bin); apt-get install postgresql"
        )
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    server = PostgresServer(bindir)
    server.start()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
async def orm_db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """The plugin's tables in a fresh database made by its migrations, SQLite or PostgreSQL,
    for one test (``tests/orm_engines.bound_to``); yields the engine's name."""
    from tests.orm_engines import bound_to

    if request.param == "postgresql":
        server: PostgresServer = request.getfixturevalue("postgres")
        url = server.url(server.create_database())
    else:
        url = f"sqlite+aiosqlite:///{tmp_path / 'plugin.sqlite3'}"
    async with bound_to(url):
        yield request.param


@pytest.fixture
def chroma_proxy(chroma_server: ChromaServer) -> Iterator[ChromaProxy]:
    """A proxy in front of ``chroma_server`` that can hold a collection's drop (``ChromaProxy``)."""
    with ChromaProxy(chroma_server) as proxy:
        yield proxy


@pytest.fixture
def no_retries() -> Iterator[None]:
    """Fail fast when the LLM server answers 500 (no SDK retries with backoff)."""
    from amrita_core import get_config

    llm = get_config().llm
    saved = llm.max_retries
    llm.max_retries = 0
    yield
    llm.max_retries = saved


@contextlib.contextmanager
def captured_logs(level: str, *, with_level: bool = True) -> Iterator[list[str]]:
    """Log lines at ``level`` and above while the block runs ("LEVEL message" or the message)."""
    from nonebot import logger

    lines: list[str] = []

    def sink(message: Any) -> None:
        record = message.record
        lines.append(
            f"{record['level'].name} {record['message']}" if with_level else record["message"]
        )

    handler = logger.add(sink, level=level)
    try:
        yield lines
    finally:
        logger.remove(handler)


@pytest.fixture
def logs() -> Iterator[list[str]]:
    """INFO and above as "LEVEL message" lines (modules may override the level)."""
    with captured_logs("INFO") as lines:
        yield lines


@pytest.fixture
def whole_replies() -> Iterator[None]:
    """Send chat replies in one piece: "natural chat style" sleeps 1-3 s per sentence."""
    from amrita.plugins.chat.config import config_manager

    function = config_manager.config.function
    saved = function.nature_chat_style
    function.nature_chat_style = False
    yield
    function.nature_chat_style = saved


@pytest.fixture
def work_dir() -> Path:
    return WORK


# ---------------------------------------------------------------------------
# Plugin objects against local and remote Chroma
# ---------------------------------------------------------------------------


def env_for(mode: str, chroma: ChromaEndpoint | None = None, **extra: Any):
    from amrita_plugin_memory.core.config import EnvConfig

    values: dict[str, Any] = {
        "embedding_model_url": EMBED.url,
        "embedding_model_name": EMBED_MODEL,
        "embedding_proctol": "ollama-embed",
        "embedding_timeout_seconds": 3,
        "vector_db_type": mode,
        # In-process local Chroma for in-test runtimes (a child server per runtime
        # would add a second each); the served mode: tests/test_local_server.py and
        # every bot process (the default).
        "vector_db_local_server": False,
    }
    if chroma is not None:
        values |= {"vector_db_server": chroma.host, "vector_db_port": chroma.port}
    values |= extra
    return EnvConfig.load(values)


@pytest.fixture(params=["local", "remote"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, embed_server: EmbeddingServer
) -> AsyncIterator[Any]:
    """A :class:`MemoryStore` on its own collection, embedded or remote."""
    from amrita_plugin_memory.embedding.client import EmbeddingClient
    from amrita_plugin_memory.storage.chroma.connection import ChromaConnection
    from amrita_plugin_memory.storage.memory_store import MemoryStore

    chroma = request.getfixturevalue("chroma_server") if request.param == "remote" else None
    env = env_for(request.param, chroma)
    connection = ChromaConnection(env, tmp_path / "vector_db.chroma")
    embedder = EmbeddingClient.from_env(env)
    embedder.max_retries = 1
    embedder.backoff = 0.05
    s = MemoryStore(connection, embedder, name=f"test-{uuid.uuid4().hex[:12]}")
    yield s
    if request.param == "remote":
        try:
            await connection.delete_collection(s.name)
        except Exception:
            pass
    await embedder.close()
    connection.close()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    from tests.reliability_stats import STATS

    if STATS.inputs_tried or STATS.faults_injected:
        terminalreporter.write_line(STATS.summary())
