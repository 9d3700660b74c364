"""When two memories say the same thing: the notion shared by write-merging and the L3 loop.

Two texts are duplicates when their vectors are close (cosine similarity) AND
their wording overlaps AND no value differs between them. The last test is
what keeps ``住在越秀区`` / ``住在天河区`` (or two room numbers, or two pet
names) apart even though a vector model puts them next to each other: the
character-level diff of two duplicates only inserts or drops filler words,
while two different facts *replace* a value (a number, a Latin word, a CJK
character that is not a particle or pronoun) or add or drop a negation.
Conservative on purpose: a missed merge leaves two similar memories, a wrong
merge would hide a fact.
"""

from __future__ import annotations

import difflib
import math
import re
import unicodedata
from collections.abc import Sequence

from .ranking import tokenize

__all__ = ["cosine", "is_duplicate_text", "text_similarity", "values_conflict"]

_FILLER = frozenset("的了是在有和与及也都就还又很挺把被给对向从用户她他它我你们这那个只位名叫为称")
"""Characters that carry no value by themselves (particles, pronouns, measure words)."""

_NEGATION = re.compile(r"[不没别未无非莫勿]|\b(?:not|no|never|dont|doesnt|didnt|isnt|cant|wont)\b")
"""A negation inserted or dropped turns a fact into its opposite."""

_ALNUM = re.compile(r"[0-9a-z]")



def _norm(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).lower()
    return "".join(ch for ch in text if ch.isalnum())


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity of two vectors (0 when either is all zeros)."""
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


def text_similarity(a: str, b: str) -> float:
    """Overlap of the keyword tokens: shared / tokens of the shorter text (0..1)."""
    ta, tb = set(tokenize(a)), set(tokenize(b))
    if not ta or not tb:
        return 1.0 if _norm(a) == _norm(b) else 0.0
    return len(ta & tb) / min(len(ta), len(tb))


def _carries_value(segment: str) -> bool:
    return any(ch not in _FILLER for ch in segment)


def values_conflict(a: str, b: str) -> bool:
    """Whether turning ``a`` into ``b`` replaces a value (see the module docstring)."""
    na, nb = _norm(a), _norm(b)
    matcher = difflib.SequenceMatcher(None, na, nb, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        old, new = na[i1:i2], nb[j1:j2]
        # A negation inside the shared text flips it ("喜欢" / "不喜欢"); one in a clause
        # added at the end only adds to it ("不加糖" / "不加糖也不加奶").
        at_end = i2 == len(na) and j2 == len(nb)
        if op in ("insert", "delete") and not at_end and _NEGATION.search(old + new):
            return True
        if op != "replace":
            continue
        if _NEGATION.search(old) is None and _NEGATION.search(new) is not None:
            return True
        if _ALNUM.search(old) or _ALNUM.search(new):
            return True  # another number, code or Latin word
        if _carries_value(old) and _carries_value(new):
            return True
    # A Latin word replaced by another ("mains Mercy" / "mains Tracer"): a character
    # diff sees only insertions and deletions inside the words, so compare words.
    words_a = {t for t in tokenize(a) if t.isascii() and t.isalpha()}
    words_b = {t for t in tokenize(b) if t.isascii() and t.isalpha()}
    if words_a - words_b and words_b - words_a:
        return True
    # Numbers and codes must be the same set (a value added or dropped is a different fact).
    nums_a = {t for t in tokenize(a) if t.isascii() and any(c.isdigit() for c in t)}
    nums_b = {t for t in tokenize(b) if t.isascii() and any(c.isdigit() for c in t)}
    return nums_a != nums_b


def is_duplicate_text(a: str, b: str, *, min_similarity: float) -> bool:
    """The text half of the duplicate test (the caller checks the vectors)."""
    if _norm(a) == _norm(b):
        return True
    return text_similarity(a, b) >= min_similarity and not values_conflict(a, b)
