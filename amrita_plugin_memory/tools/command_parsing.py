"""``/memory`` command text into a :class:`CommandRequest`: the parser built from the specs.

The commands, their Chinese aliases and help lines are declared in
:mod:`.command_specs`; this module walks their words (a tree built once from
:data:`~.command_specs.SPECS`), plain and testable without any store. Unknown
input parses to ``help``; so does a command followed by an argument it takes
none of.

Privacy rule: a user's personal memories are never posted into a group. In a
group, ``/memory user list|search|archive`` and ``/memory persona`` answer by
private message (:func:`replies_privately`: the specs declared ``private``); the
matcher builds the request's :class:`~..storage.scope.Scope` with it, so such an
answer is read as in the speaker's private chat.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .command_specs import LEGACY_HEAD, SPECS, USAGE, Argument, CommandSpec, Word, spec_of

__all__ = [
    "USAGE",
    "CommandRequest",
    "parse_command",
    "replies_privately",
    "split_head",
]

_HEAD_AND_REST = re.compile(r"\s*(\S+)(?:\s+(.*))?", re.DOTALL)


@dataclass(frozen=True, slots=True)
class CommandRequest:
    scope: str
    action: str
    argument: str


def split_head(text: str) -> tuple[str, str]:
    """The first word (lower-cased) and the rest verbatim (stripped)."""
    match = _HEAD_AND_REST.fullmatch(text)
    if match is None:
        return "", ""
    return match.group(1).lower(), (match.group(2) or "").strip()


@dataclass(slots=True)
class _Node:
    """One word of the command tree: the words that may follow it, the command it ends."""

    scope: str
    children: dict[str, _Node] = field(default_factory=dict)
    spec: CommandSpec | None = None


def _child(table: dict[str, _Node], word: Word, scope: str) -> _Node:
    node = table.get(word[0])
    if node is None:
        node = _Node(scope)
        for alias in word:
            if alias in table:
                raise ValueError(f"/memory: the word {alias!r} means two things here")
            table[alias] = node
    elif any(table.get(alias) is not node for alias in word):
        raise ValueError(f"/memory: the word {word[0]!r} is declared with other aliases")
    return node


def _tree() -> dict[str, _Node]:
    """The first words of :data:`SPECS`, each with the words that may follow."""
    roots: dict[str, _Node] = {}
    for spec in SPECS:
        node = _child(roots, spec.head, spec.scope)
        for word in spec.words:
            node = _child(node.children, word, spec.scope)
        if node.spec is not None:
            raise ValueError(f"/memory {spec.scope} {spec.action}: its words are taken")
        node.spec = spec
    return roots


_ROOTS = _tree()


def _argument(kind: Argument, rest: str) -> str | None:
    """The request's argument from what follows the words; ``None``: not allowed."""
    if kind == "text":
        return " ".join(rest.split())
    if kind == "raw":
        return rest
    if kind == "word":
        word, more = split_head(rest)
        return word if word and not more else None
    return None if rest else ""


def parse_command(text: str) -> CommandRequest:
    """Parse the text after ``/memory``; unknown input becomes ``help``."""
    word, rest = split_head(text)
    node = _ROOTS.get(word)
    if node is None:  # no head: the legacy personal form
        node, rest = _ROOTS[LEGACY_HEAD[0]], text.strip()
    while rest:
        word, more = split_head(rest)
        child = node.children.get(word)
        if child is None:
            break
        node, rest = child, more
    spec = node.spec
    argument = None if spec is None else _argument(spec.argument, rest)
    if spec is None or argument is None:
        return CommandRequest(node.scope, "help", "")
    return CommandRequest(spec.scope, spec.action, argument)


def replies_privately(request: CommandRequest) -> bool:
    """Whether the reply is about one user only and must not be posted into a group."""
    spec = spec_of(request.scope, request.action)
    return spec is not None and spec.private
