"""Ranking arithmetic of ``read_memory``: keywords and their coverage, scores, age decay.

Pure functions (no storage, no framework) so that every channel and the
benchmark compute the same thing.

Tokens: Chinese has no spaces, and a vector model blurs exact strings (a room
number ``1602``, a code ``A1037``, a pet called ``年糕``). Text is normalised
(NFKC: full-width digits and letters become ASCII; lower case), then split into
runs at spaces and punctuation. A pure ASCII run is one token (``a1037``,
``1602``, ``mayday``). In a run with CJK (or other non-ASCII) characters every
ASCII letter/digit group is a token too, and the run's units (one character,
or one ASCII group) give their bigrams: ``7月3日`` -> ``7 3 7月 月3 3日``, so a
date or a room number matches as a whole and not only digit by digit.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

import numpy as np

__all__ = [
    "KeywordIndex",
    "age_days",
    "combine",
    "decay_factor",
    "decayed_distance",
    "parse_time",
    "tokenize",
]

_RUN = re.compile(r"[^\W_]+", re.UNICODE)
_UNIT = re.compile(r"[a-z0-9]+|[^a-z0-9]", re.UNICODE)

_ASCII_STOP = frozenset(
    "a an the is are was were be to of in on at for and or my your his her its it i you he she "
    "we they me do does did what which who whom where when how s t d m ll re ve".split()
)
"""English words too common to mean anything in a keyword match (with the pieces
of contractions: "user's" gives ``user`` and ``s``)."""


def tokenize(text: str) -> list[str]:
    """Keyword tokens of ``text`` (see the module docstring); repeated tokens repeat."""
    norm = unicodedata.normalize("NFKC", text).lower()
    tokens: list[str] = []
    for run in _RUN.findall(norm):
        if run.isascii():
            if run not in _ASCII_STOP:
                tokens.append(run)
            continue
        units = _UNIT.findall(run)
        tokens.extend(u for u in units if u.isascii())  # 1602, a1037 inside Chinese text
        if len(units) == 1:
            if not units[0].isascii():
                tokens.append(units[0])
        else:
            tokens.extend(units[i] + units[i + 1] for i in range(len(units) - 1))
    return tokens


class KeywordIndex:
    """Which memories of one partition hold which keyword tokens, with their IDF.

    Built once per cached partition snapshot; :meth:`coverage` costs
    O(matching postings), not O(documents). Each token's rows are a numpy
    array, not a list of Python objects: a cache of many partitions would
    otherwise hold millions of objects that every full GC pass walks (on the
    event loop), and summing shares is one vector operation per token.
    """

    def __init__(self, documents: Sequence[str | None]) -> None:
        self.size = len(documents)
        rows: dict[str, list[int]] = {}
        for row, doc in enumerate(documents):
            text = doc or ""
            for token in set(tokenize(text)):
                rows.setdefault(token, []).append(row)
        self.postings: dict[str, np.ndarray] = {
            token: np.asarray(found, dtype=np.int32) for token, found in rows.items()
        }

    def idf(self, token: str) -> float:
        """BM25's inverse document frequency of ``token`` (always > 0)."""
        df = len(self.postings.get(token, ()))
        return math.log(1.0 + (self.size - df + 0.5) / (df + 0.5))

    def coverage(self, query: str) -> dict[int, float]:
        """``row -> share`` of the query's keyword weight (IDF) found in that row.

        Only tokens that occur in the partition count (a question's own words
        "什么"、"来着" are in no memory); a token in every memory ("用户") has an
        IDF near 0 and counts for nearly nothing.
        """
        present = [token for token in set(tokenize(query)) if token in self.postings]
        weights = {token: self.idf(token) for token in present}
        total = sum(weights.values())
        if total <= 0:
            return {}
        scores = np.zeros(self.size, dtype=np.float64)
        for token in present:  # a token's rows are unique
            scores[self.postings[token]] += weights[token] / total
        found = np.flatnonzero(scores)
        return dict(zip(found.tolist(), scores[found].tolist(), strict=True))


def combine(
    distances: Mapping[str, float | None], coverage: Mapping[str, float], weight: float
) -> list[str]:
    """Ids best first by ``best / distance + weight * coverage``.

    The vector part is 1 for the closest candidate and shrinks with the
    relative distance, so the keyword part (the share of the query's
    keyword weight a memory holds, 0..1) decides only what the vectors leave
    close: a memory holding the whole of "A1037" beats a slightly closer one
    without it, a memory sharing one common word of a paraphrase does not.
    (Rank fusion, tried first, let that one shared word win: see the README's
    recall table.) A candidate without a distance counts as far.
    Ties keep the order of ``distances``.
    """
    known = [d for d in distances.values() if d is not None and d > 0]
    best = min(known) if known else 0.0

    def vector_part(d: float | None) -> float:
        if d is None:
            return 0.0
        return 1.0 if d <= best or d <= 0 else best / d

    order = {memory_id: i for i, memory_id in enumerate(distances)}
    score = {
        memory_id: vector_part(d) + weight * coverage.get(memory_id, 0.0)
        for memory_id, d in distances.items()
    }
    return sorted(score, key=lambda m: (-score[m], order[m]))


def parse_time(value: str) -> datetime | None:
    """An ISO timestamp as an aware datetime (naive = UTC); ``None`` if unreadable."""
    try:
        parsed = datetime.fromisoformat(value)
    except (TypeError, ValueError):
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def age_days(stamp: str, now: datetime) -> float:
    """Days from the ISO timestamp ``stamp`` to ``now`` (0 for a missing or bad stamp;
    naive times are UTC, as in :func:`parse_time`)."""
    then = parse_time(stamp)
    if then is None:
        return 0.0
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    return max((now - then).total_seconds() / 86_400.0, 0.0)


def decay_factor(age: float, half_life: float) -> float:
    """``0.5 ** (age / half_life)``: 1 for a new memory; 1 forever when ``half_life`` is 0."""
    if half_life <= 0 or age <= 0:
        return 1.0
    return 0.5 ** (age / half_life)


def decayed_distance(distance: float, factor: float, weight: float) -> float:
    """A vector distance grown by age: ``distance * (1 + weight * (1 - factor))``.

    Relative, so it means the same for every model's distance scale: with
    ``weight = 0.1`` a fully aged memory loses to a fresh one only when their
    distances are within 10 % (a near tie); a clearly closer match still wins.
    """
    return distance * (1.0 + weight * (1.0 - factor))
