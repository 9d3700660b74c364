"""The keyword channel of ``read_memory``: tokens, stems and a partition's keyword index.

Pure functions (no storage, no framework) so that every channel and the
benchmark compute the same thing (the score that combines the channels is
:mod:`.scores`).

Tokens: Chinese has no spaces, and a vector model blurs exact strings (a room
number ``1602``, a code ``A1037``, a pet called ``年糕``). Text is normalised
(NFKC: full-width digits and letters become ASCII; lower case), then split into
runs at spaces and punctuation. A pure ASCII run is one token (``a1037``,
``1602``, ``mayday``). In a run with CJK (or other non-ASCII) characters every
ASCII letter/digit group is a token too, and the run's units (one character,
or one ASCII group) give their bigrams: ``7月3日`` -> ``7 3 7月 月3 3日``, so a
date or a room number matches as a whole and not only digit by digit.

The keyword channel indexes :func:`keyword_terms`: these tokens with English
words stemmed (Snowball's English stemmer: "painted" and "painting" are both
``paint``), so a question asks in other forms of a memory's words. Measured on
LoCoMo (``bench.locomo_bench``), stemming is what lifts the keyword channel
above the plain dense ranking; :func:`tokenize` itself stays unstemmed (write
dedup compares with it: "cat" and "cats" are not one statement there).
A CJK bigram is weaker evidence than a word (it also matches across word
boundaries: "家的" in "该给主子囤哪家的粮" and in "用户家的wifi"), so in the
ranking's keyword part it counts :data:`CJK_UNIT` of a word's weight
(:meth:`KeywordIndex.coverage` with ``cjk_unit``).
"""

from __future__ import annotations

import functools
import math
import re
import threading
import unicodedata
from collections.abc import Sequence

import numpy as np
import snowballstemmer

__all__ = ["CJK_UNIT", "KeywordIndex", "keyword_terms", "tokenize"]

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


CJK_UNIT = 0.4
"""Weight of a CJK term (a bigram or a lone character) in the ranking's keyword part,
a word's being 1. Measured: with ``keyword_weight`` above 0.1 and CJK terms at full
weight, Chinese paraphrased questions of ``bench.recall_bench`` lose R@1 (a shared
bigram like "名字" or "家的" pulls the wrong memory first); at 0.4 of the default
0.25 (= the former 0.1) they rank exactly as before, while English words get the
0.25 that LoCoMo's questions need (``bench.locomo_bench``, dev split)."""

_STEMMER = snowballstemmer.stemmer("english")
_STEM_LOCK = threading.Lock()  # a Snowball stemmer keeps its state in the object


@functools.lru_cache(maxsize=1 << 16)
def _stem(word: str) -> str:
    """Snowball English stem of one lower-case word (cached: an index of 10,000
    memories stems a few thousand distinct words, each ~30 µs the first time)."""
    with _STEM_LOCK:
        return _STEMMER.stemWord(word)


def keyword_terms(text: str) -> list[str]:
    """The keyword channel's terms of ``text``: :func:`tokenize` with English words
    stemmed (pure letters only: ``a1037``, ``1602`` and CJK terms stay as they are)."""
    return [_stem(t) if t.isascii() and t.isalpha() else t for t in tokenize(text)]


def _unit(term: str, cjk_unit: float) -> float:
    """A term's weight per unit of IDF: 1 for a word, number or code; ``cjk_unit`` for CJK."""
    return 1.0 if term.isascii() else cjk_unit


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
        lengths: list[int] = []
        for row, doc in enumerate(documents):
            terms = keyword_terms(doc or "")
            lengths.append(len(terms))
            for token in set(terms):
                rows.setdefault(token, []).append(row)
        self.lengths = np.asarray(lengths, dtype=np.int32)
        """Each row's number of terms (keyword-only reads: of equal shares, the shorter first)."""
        self.postings: dict[str, np.ndarray] = {
            token: np.asarray(found, dtype=np.int32) for token, found in rows.items()
        }

    def idf(self, token: str) -> float:
        """BM25's inverse document frequency of ``token`` (always > 0)."""
        df = len(self.postings.get(token, ()))
        return math.log(1.0 + (self.size - df + 0.5) / (df + 0.5))

    def coverage(self, query: str, *, cjk_unit: float = 1.0) -> dict[int, float]:
        """``row -> share`` of the query's keyword weight (IDF) found in that row.

        Only tokens that occur in the partition count (a question's own words
        "什么"、"来着" are in no memory); a token in every memory ("用户") has an
        IDF near 0 and counts for nearly nothing. With ``cjk_unit`` (the ranking
        passes :data:`CJK_UNIT`), a CJK term found counts only that part of its
        IDF: a Chinese question's best share is then ``cjk_unit``, an English one's still 1.
        """
        present = [token for token in set(keyword_terms(query)) if token in self.postings]
        weights = {token: self.idf(token) for token in present}
        total = sum(weights.values())
        if total <= 0:
            return {}
        scores = np.zeros(self.size, dtype=np.float64)
        for token in present:  # a token's rows are unique
            scores[self.postings[token]] += weights[token] * _unit(token, cjk_unit) / total
        found = np.flatnonzero(scores)
        return dict(zip(found.tolist(), scores[found].tolist(), strict=True))
