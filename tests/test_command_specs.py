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
import re
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


ADDED_AFTER_THE_SNAPSHOT = ("/memory episodes ", "/memory group episodes ")
"""Help lines of commands declared after the snapshot (#48, past conversations). Their
words (``episodes``, ``对话``, ``聊过``) begin none of the snapshot's inputs, so every
snapshotted input still parses as before (the test above); the help reply is the
snapshot's with these lines added, nothing else changed."""


def test_help_reply_is_unchanged() -> None:
    kept = [line for line in P.USAGE.splitlines() if not line.startswith(ADDED_AFTER_THE_SNAPSHOT)]
    assert _snapshot()["usage"] == "\n".join(kept)
    assert len(P.USAGE.splitlines()) - len(kept) == 4


README = Path(__file__).resolve().parent.parent / "README.md"
TABLE_HEADING = "## 用户命令 `/memory`（别名 `记忆`）"
S = lazy_import("amrita_plugin_memory.tools.command_specs")


def _command(usage: str) -> str:
    """The words of a usage line up to its first placeholder or alternative:
    ``/memory group anonymize on|off — …`` -> ``group anonymize``."""
    words: list[str] = []
    for word in usage.replace("\\|", "|").split()[1:]:
        if word[0] in "[<—" or "|" in word:
            break
        words.append(word)
    return " ".join(words)


def _readme_commands() -> list[str]:
    text = README.read_text(encoding="utf-8")
    start = text.index(TABLE_HEADING)
    end = text.find("\n## ", start + len(TABLE_HEADING))
    section = text[start:end]
    rows = re.findall(r"^\| `(/memory [^`]+)`", section, re.M)
    assert rows, "no /memory table in the README"
    return [_command(row) for row in rows]


def test_readme_table_and_help_reply_name_the_same_commands() -> None:
    declared = [_command(line) for spec in S.SPECS for line in spec.usage]
    readme = _readme_commands()
    assert sorted(set(declared)) == sorted(declared), "a command in two help lines"
    assert set(readme) == set(declared), (
        f"only in the README: {sorted(set(readme) - set(declared))}; "
        f"only in the help reply: {sorted(set(declared) - set(readme))}"
    )
    assert S.LEGACY_USAGE in README.read_text(encoding="utf-8").replace("`", "")
    assert P.USAGE.splitlines()[1:-1] == [line for spec in S.SPECS for line in spec.usage]


def test_each_help_line_parses_to_the_spec_that_declares_it() -> None:
    for spec in S.SPECS:
        for line in spec.usage:
            needs_word = spec.argument == "word"  # e.g. ``group anonymize on|off``
            request = P.parse_command(_command(line) + (" on" if needs_word else ""))
            owner = S.spec_of(request.scope, request.action)
            assert owner is spec, f"{line!r} parses to {request}"


def test_who_and_private_agree_with_the_help_lines() -> None:
    for spec in S.SPECS:
        text = " ".join(spec.usage)
        if spec.usage and spec.who == "superuser":
            assert "仅超级用户" in text, spec
        if spec.usage and spec.who == "group_admin":
            assert "仅管理员" in text, spec
        if spec.usage and spec.private:
            assert "私聊" in text or spec.action in ("list", "search"), spec


def test_every_handler_is_routed() -> None:
    C = lazy_import("amrita_plugin_memory.tools.commands")
    handlers = {spec.handler for spec in S.SPECS}
    assert handlers == set(C._ROUTES)


def test_every_switch_is_a_configuration_key() -> None:
    config = lazy_import("amrita_plugin_memory.core.config")
    for spec in S.SPECS:
        if spec.switch is None:
            continue
        match = re.fullmatch(r"\[(\w+)\] (\w+)", spec.switch)
        assert match, f"{spec.switch!r} is not '[section] key'"
        section, key = match.groups()
        fields = config.ConfigFile.model_fields
        assert section in fields, spec
        assert key in fields[section].annotation.model_fields, spec


def test_the_plugin_menu_usage_is_the_help_reply() -> None:
    """Amrita's menu (``__plugin_meta__.usage``) shows the help reply, no handwritten copy."""
    import amrita_plugin_memory

    assert amrita_plugin_memory.__plugin_meta__.usage == S.USAGE == P.USAGE
    for spec in S.SPECS:
        for line in spec.usage:
            assert line in amrita_plugin_memory.__plugin_meta__.usage
