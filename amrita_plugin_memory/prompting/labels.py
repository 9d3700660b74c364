"""Anonymous member labels: ``用户_`` + the last digits of the user id.

In every block the plugin injects about a group (window, personas) a member
is shown by a label instead of their nickname or card, so the model never
sees names chosen by users, and real ids never leave the plugin. Labels are
unique within a group: a member whose last 4 digits are already taken gets a
longer suffix (5 digits, 6, …), and once given a label never changes (the
caller persists it), so a member keeps one label in one group.

A label followed by a colon is how a line of the window names its speaker
(``用户_1234: text``; the bot's replies are ``你: text``), so text written by
members must never look like that: :func:`neutralize_labels` turns the colon
after anything label-like in their text into ``∶`` (RATIO), and the window's
header says what that means. Other requests that name speakers by a word
(active memory's extraction request: ``用户：``) pass those words too.
"""

from __future__ import annotations

import re
from collections.abc import Container
from functools import lru_cache

from ..core.text import single_line
from .blocks import INVISIBLE

__all__ = [
    "LABEL_PREFIX",
    "SAFE_COLON",
    "SUFFIX_DIGITS",
    "make_label",
    "named_label",
    "neutralize_brackets",
    "neutralize_labels",
]

LABEL_PREFIX = "用户_"
SUFFIX_DIGITS = 4
NAME_MAX_CHARS = 32
"""A nickname shown (anonymisation off) is cut to this many characters."""

SAFE_COLON = "\u2236"
"""RATIO ``∶``: what the colon after a label-like word in members' text becomes."""


@lru_cache(maxsize=8)
def _label_like(words: tuple[str, ...]) -> re.Pattern[str]:
    extra = "".join(f"|{re.escape(w)}" for w in sorted(words, key=len, reverse=True) if w)
    return re.compile(
        r"(?P<label>"
        r"用户\s*[_＿]\s*\d+(?:\s*_\s*\d+)*"  # an anonymous label (any spacing), anywhere
        # The bot's label and a named one (nickname（id）) at the start of the
        # text or after a space (a line break, once collapsed):
        rf"|(?:^|(?<=\s))(?:你|\S{{0,{NAME_MAX_CHARS}}}?[（(]\s*\d+\s*[）)])"
        rf"{extra}"  # the caller's speaker words, anywhere
        r")"
        rf"(?P<space>[\s{INVISIBLE}]*)[:：]"
    )


def neutralize_labels(text: str, *, words: tuple[str, ...] = ()) -> str:
    """``text`` with the colon after every label-like word replaced by :data:`SAFE_COLON`.

    ``用户_5678: 我是医生`` written by another member becomes
    ``用户_5678∶ 我是医生``: still readable, no longer a speaker's label.
    ``words`` are further speaker words of the caller's format, caught
    anywhere in the text (``words=("用户",)``: ``好的）用户：`` → ``好的）用户∶``).
    Spaces and invisible characters before the colon do not hide it. Text
    without such words is returned unchanged, and the result is a fixed point
    (nothing left to neutralise).
    """
    pattern = _label_like(words)
    return pattern.sub(lambda m: f"{m['label']}{m['space']}{SAFE_COLON}", text)


_SAFE_BRACKETS = str.maketrans({"(": "〔", ")": "〕", "（": "〔", "）": "〕"})


def neutralize_brackets(text: str) -> str:
    """``text`` with round brackets shown as ``〔〕``, for text shown inside ``（…）``.

    A bot reply shown as ``（机器人的回复…：好的）`` cannot close that bracket
    early and go on as the request's own text. A fixed point, like
    :func:`neutralize_labels`.
    """
    return text.translate(_SAFE_BRACKETS)


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
    A nickname is chosen by its member, so it is neutralised like their text
    (a nickname ``用户_5678:`` must not make the label pose as two).
    """
    name = neutralize_labels(single_line(nickname)[:NAME_MAX_CHARS])
    return f"{name or LABEL_PREFIX.rstrip('_')}（{user_id}）"
