"""Anonymous member labels: ``用户_`` + the last digits of the user id.

In every block the plugin injects about a group (window, personas) a member
is shown by a label instead of their nickname or card, so the model never
sees names chosen by users, and real ids never leave the plugin. Labels are
unique within a group: a member whose last 4 digits are already taken gets a
longer suffix (5 digits, 6, …), and once given a label never changes (the
caller persists it), so a member keeps one label in one group.
"""

from __future__ import annotations

from collections.abc import Container

from .text import single_line

__all__ = ["LABEL_PREFIX", "SUFFIX_DIGITS", "make_label", "named_label"]

LABEL_PREFIX = "用户_"
SUFFIX_DIGITS = 4
NAME_MAX_CHARS = 32
"""A nickname shown (anonymisation off) is cut to this many characters."""


def make_label(user_id: str, taken: Container[str]) -> str:
    """The shortest free label of ``user_id`` among ``taken`` (at least 4 digits).

    When even the whole id is taken (an id of 4 digits or fewer colliding
    with a longer one's label), a counter makes it unique: ``用户_1234_2``.
    """
    uid = user_id.strip() or "0"
    for digits in range(min(SUFFIX_DIGITS, len(uid)), len(uid) + 1):
        label = LABEL_PREFIX + uid[-digits:]
        if label not in taken:
            return label
    base = LABEL_PREFIX + uid
    counter = 2
    while f"{base}_{counter}" in taken:
        counter += 1
    return f"{base}_{counter}"


def named_label(nickname: str, user_id: str) -> str:
    """The label of a member when the group switched anonymisation off.

    The nickname (one line, cut) followed by the id, so two members with the
    same nickname stay apart and the label still maps back to one member.
    """
    name = single_line(nickname)[:NAME_MAX_CHARS] or LABEL_PREFIX.rstrip("_")
    return f"{name}（{user_id}）"
