"""The quick tier (``pytest -m quick``): no test in it starts a process (``tests/quick_tier.py``)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from tests.conftest import WORK, _session_process
from tests.quick_tier import BOT_FIXTURES, SERVER_FIXTURES, SERVER_PARAMS, ProcessGuard, is_quick


def test_no_quick_test_uses_a_server(request: pytest.FixtureRequest) -> None:
    """Of the tests collected in this run (the whole suite in CI), none marked quick has the
    bot answer a chat turn or uses a fixture or a parameter that starts a server, and every
    test the rule admits is marked.
    (That none starts a process otherwise is checked around every test: ``ProcessGuard``.)"""
    items = request.session.items
    assert request.node in items
    for item in items:
        quick = item.get_closest_marker("quick") is not None
        assert quick == is_quick(item), item.nodeid
        if not quick:
            continue
        fixtures = set(getattr(item, "fixturenames", ()))
        assert not (BOT_FIXTURES | SERVER_FIXTURES) & fixtures, item.nodeid
        callspec = getattr(item, "callspec", None)
        params = callspec.params if callspec is not None else {}
        assert not any(params.get(n) == v for n, v in SERVER_PARAMS), item.nodeid


class QuickTest:
    """A test of the quick tier, as the guard sees one (its id and its markers)."""

    nodeid = "tests/test_example.py::test_quick"

    def get_closest_marker(self, name: str) -> pytest.Mark | None:
        return pytest.mark.quick.mark if name == "quick" else None


@pytest.mark.process  # it starts a process on purpose (the session's guard allows it here)
def test_a_quick_test_that_starts_a_process_fails() -> None:
    guard = ProcessGuard(lambda command: False)
    guard.install()
    quick: Any = QuickTest()
    guard.check(quick)  # started nothing: fine
    with guard.running(quick):
        subprocess.run([sys.executable, "-c", "pass"], check=True)
    assert guard.started[quick.nodeid][0].startswith(sys.executable)
    with pytest.raises(pytest.fail.Exception, match="started a process"):
        guard.check(quick)


def test_the_session_bots_own_processes_are_not_a_tests() -> None:
    served = [sys.executable, "-c", "…", "1", "run", "--path", str(WORK / "data" / "x")]
    assert _session_process(served)
    server = ["chroma", "run", "--path", str(WORK / "chroma-server")]
    assert not _session_process(server)
    assert not _session_process(["ambot", "run"])
