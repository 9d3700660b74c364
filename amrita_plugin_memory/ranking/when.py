"""The time a question names, its tense, and its script: what picks the ranking's channels.

Pure functions (no storage, no framework). A question that names a time
("昨天晚上我说了什么", "上周三", "我们第一次聊天的时候", "What did I say last
week?", "in October") asks about what was said then, relative to the moment
the question was sent: :func:`named_period` turns it into a :class:`Period` of
the owner's local time (``now`` is the owner's aware local datetime, so "今天"
at 07:30 Beijing time is that Beijing day, never the UTC one). Weeks start on
Monday; a month or weekday without a year is the latest one not in the
future; a question about the future ("明天", "下周", "next week") names no
past period (``None``). The recognised words and their spans are listed in
docs/retrieval.md (问题提到的时间); the rules live in :mod:`.when_zh` and
:mod:`.when_en`, the arithmetic in :mod:`.period`. Text with CJK characters is
read as Chinese first, then as English (mixed questions).

:func:`tense` tells "now" questions (现在 / still) from "before" ones (以前 /
used to), for rankings that prefer the newer or the older of two memories.
"""

from __future__ import annotations

import re
import unicodedata
from datetime import UTC, datetime
from typing import Literal

from .period import FIRST_CHAT, LAST_CHAT, Anchor, Miss, Period
from .when_en import en_period
from .when_zh import zh_period

__all__ = ["FIRST_CHAT", "LAST_CHAT", "Period", "has_cjk", "named_period", "tense"]

MAX_CHARS = 2000
"""Only a question's first characters are read (a bound: a huge message costs no more)."""


def has_cjk(text: str) -> bool:
    """Whether ``text`` holds a CJK ideograph, kana or hangul (the query's script is "CJK")."""
    return any(
        "\u4e00" <= ch <= "\u9fff"
        or "\u3400" <= ch <= "\u4dbf"
        or "\u3040" <= ch <= "\u30ff"
        or "\uac00" <= ch <= "\ud7af"
        for ch in text
    )


def named_period(text: str, now: datetime) -> Period | str | None:
    """The period ``text`` names (:class:`Period`, in ``now``'s zone), :data:`FIRST_CHAT`,
    :data:`LAST_CHAT`, or ``None`` (no time named, or only a future one).

    ``now`` is the moment the message was sent, as the owner's aware local datetime;
    a naive one is taken as UTC.
    """
    if not isinstance(text, str) or not text:
        return None
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    text = text[:MAX_CHARS]
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text)  # full-width digits and letters
    anchor = Anchor(now)
    found = zh_period(text, anchor) if has_cjk(text) else Miss.SKIP
    if found is Miss.SKIP:
        found = en_period(text, anchor)
    return None if found is Miss.SKIP else found


_NOW = re.compile(
    r"现在|目前|如今|眼下|当前|还在|仍然|仍旧|依然|依旧|还(?!记得|有没有)[^，。？！,.?!]{0,12}吗"
    r"|(?<!just\s)\b(?:now|still|currently|these\s+days|nowadays|at\s+the\s+moment|at\s+present"
    r"|any\s?more)\b",
    re.IGNORECASE,
)
# "三天以前" / "the day before yesterday" / "in the past week" name a period, not a tense.
_BEFORE = re.compile(
    r"(?<![天周月年期拜])(?:以前|之前)|原来|过去|曾经|当初|从前|以往|早先"
    r"|\b(?:before(?!\s+(?:yesterday|last))|used\s+to|did\s+\w+\s+use\s+to|previously|formerly|back\s+then|originally"
    r"|in\s+the\s+past(?!\s+(?:\w+\s+){0,2}(?:days?|weeks?|months?|years?)\b))\b",
    re.IGNORECASE,
)


def tense(text: str) -> Literal["now", "before"] | None:
    """``"now"`` for a question about the present state (现在 / 目前 / 还…吗 / still /
    currently), ``"before"`` for one about an earlier state (以前 / 之前 / used to /
    previously); ``None`` for neither, or both (a question comparing then and now)."""
    if not isinstance(text, str):
        return None
    text = text[:MAX_CHARS]
    now, before = _NOW.search(text) is not None, _BEFORE.search(text) is not None
    if now == before:
        return None
    return "now" if now else "before"
