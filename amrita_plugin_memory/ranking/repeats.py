"""When a write only repeats a memory: the notion shared by write-merging and the L3 loop.

A *true repeat* is the same statement in nearly the same words. Two texts
repeat each other when their token sequences are equal once punctuation,
white space, case, full-width forms and pure filler (particles such as 的 了
呢 吧, intensifiers such as 很 挺, English articles and "really"/"very") are
dropped. Everything else counts, in order: pronouns and person words (用户 /
我 / 哥哥: *who*), modality (想 / 在 / 打算 / 恐怕: plan or fact), negation,
numbers and names. So "用户喜欢喝咖啡" / "用户很喜欢喝咖啡。" repeat, while
"用户的哥哥在腾讯工作" / "用户在腾讯工作", "用户欠我500块" / "我欠用户500块",
"妻子" / "前妻", "想学" / "在学" and "喜欢" / "不喜欢" do not, however close
their vectors are (a vector model puts all of them next to each other).

Deliberately narrow: a missed merge leaves two memories, a wrong merge hides
a fact or carries it where it does not belong. A semantic repeat in other
words, or an update of a value, is the extraction's job (it sees the related
memories), not a word list's.

A repeat is also confined to where it was said: a memory written in a private
chat and one written in a group (or in two different groups) are never one
memory, even when their texts repeat each other. Merging them would make the
group's copy carry the private text (or the reverse).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence

from ..core.records import MemoryRecord

__all__ = ["FILLER", "cosine", "is_repeat", "repeat_tokens", "repeats_memory"]

FILLER = frozenset("的 了 呢 吧 啊 呀 哦 嘛 很 挺 a an the really very quite".split())
"""Tokens that change no statement: particles, intensifiers, English articles.

Never in here: pronouns and person words, modality (想 要 打算 可能 也许 恐怕 还没),
negation, numbers, aspect words such as 在 (``想学`` / ``在学``)."""

_UNIT = re.compile(r"[a-z0-9]+|[^\W_]", re.UNICODE)
"""An ASCII word or number, or one other letter (one CJK character)."""


def repeat_tokens(text: str) -> tuple[str, ...]:
    """The token sequence two repeats share: NFKC, lower case, no punctuation or
    white space, ASCII words and numbers whole, every other character alone,
    :data:`FILLER` dropped; order kept."""
    norm = unicodedata.normalize("NFKC", text).lower()
    return tuple(unit for unit in _UNIT.findall(norm) if unit not in FILLER)


def is_repeat(a: str, b: str) -> bool:
    """Whether ``b`` says exactly what ``a`` says (see the module docstring)."""
    ta, tb = repeat_tokens(a), repeat_tokens(b)
    if not ta and not tb:  # nothing but filler and punctuation: only the same text
        return unicodedata.normalize("NFKC", a).strip() == unicodedata.normalize("NFKC", b).strip()
    return ta == tb


def repeats_memory(memory: MemoryRecord, content: str, *, scope: str, origin: str) -> bool:
    """Whether a text ``content`` written with ``scope`` and ``origin`` repeats ``memory``:
    the same scope, the same origin (``private`` or ``group:<gid>``) and :func:`is_repeat`."""
    return memory.scope == scope and memory.origin == origin and is_repeat(memory.content, content)


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity of two vectors (0 when either is all zeros)."""
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0
