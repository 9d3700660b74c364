"""The ``/memory`` commands as declared: parser, help reply and README agree.

``data/command_parses.json.gz`` is a snapshot of the parser as it was before
the commands were declared as specs (7 823 inputs: every first word, second
word and alias of the old word tables, with several tails), each with its
request and whether it replies privately, plus the help reply of that time.
The parser built from the specs must give exactly the same answers.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from tests.lazy import lazy_import

P = lazy_import("amrita_plugin_memory.tools.command_parsing")

SNAPSHOT = Path(__file__).resolve().parent / "data" / "command_parses.json.gz"


def _snapshot() -> dict[str, Any]:
    return json.loads(gzip.decompress(SNAPSHOT.read_bytes()).decode())


def test_every_snapshotted_input_parses_as_before() -> None:
    wrong: list[str] = []
    for text, scope, action, argument, private in _snapshot()["parses"]:
        request = P.parse_command(text)
        got = (request.scope, request.action, request.argument, P.replies_privately(request))
        if got != (scope, action, argument, private):
            wrong.append(f"{text!r}: {got} != {(scope, action, argument, private)}")
    assert not wrong, "\n".join(wrong[:30])


def test_help_reply_is_unchanged() -> None:
    assert _snapshot()["usage"] == P.USAGE
