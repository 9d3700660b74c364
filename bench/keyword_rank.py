"""Keyword-only rankings the keyword benchmark compares with the plugin's (pure functions).

Plain BM25 (Robertson–Spärck Jones IDF as in Lucene, ``k1`` 1.2, ``b`` 0.75) over a
document's term list, with three ways of cutting text into terms:

- :func:`plugin_terms`: the plugin's own keyword terms (``ranking/keywords.keyword_terms``:
  English words stemmed, stop words dropped, CJK runs as overlapping bigrams of their units);
- :func:`bigram_terms`: the published plugin's documented scheme, written here from its
  description only: Chinese as overlapping character bigrams, English as lower-case words;
- :func:`unigram_terms`: the plugin's terms plus every CJK character on its own
  ("words or bigrams": does a single character help or hurt?).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["BM25", "TERMS", "bigram_terms", "cjk_characters", "plugin_terms", "unigram_terms"]

_CJK = r"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_PIECE = re.compile(rf"[a-z0-9]+|[{_CJK}]+")
_CJK_CHAR = re.compile(rf"[{_CJK}]")


def plugin_terms(text: str) -> list[str]:
    """The plugin's keyword terms (stemmed words, CJK unit bigrams; imported here: the
    plugin is importable only once the benchmark's NoneBot is set up)."""
    from amrita_plugin_memory.ranking.keywords import keyword_terms

    return keyword_terms(text)


def bigram_terms(text: str) -> list[str]:
    """Lower-case ASCII words; each CJK run as its overlapping character bigrams
    (a run of one character is that character)."""
    norm = unicodedata.normalize("NFKC", text).lower()
    out: list[str] = []
    for piece in _PIECE.findall(norm):
        if piece.isascii():
            out.append(piece)
        elif len(piece) == 1:
            out.append(piece)
        else:
            out.extend(piece[i : i + 2] for i in range(len(piece) - 1))
    return out


def cjk_characters(text: str) -> list[str]:
    """Every CJK character of ``text`` (NFKC), in order."""
    return _CJK_CHAR.findall(unicodedata.normalize("NFKC", text))


def unigram_terms(text: str) -> list[str]:
    """:func:`plugin_terms` plus each CJK character of the text as a term of its own."""
    return [*plugin_terms(text), *cjk_characters(text)]


TERMS: dict[str, Callable[[str], list[str]]] = {
    "plugin terms": plugin_terms,
    "bigrams": bigram_terms,
    "plugin terms + CJK unigrams": unigram_terms,
}


class BM25:
    """Okapi BM25 over the term lists of one partition's documents."""

    def __init__(
        self,
        documents: Sequence[str],
        terms: Callable[[str], list[str]],
        *,
        k1: float = 1.2,
        b: float = 0.75,
    ) -> None:
        self.terms = terms
        self.k1, self.b = k1, b
        self.counts = [Counter(terms(doc)) for doc in documents]
        lengths = np.asarray([sum(c.values()) for c in self.counts], dtype=np.float64)
        self.norm = k1 * (1.0 - b + b * lengths / max(float(lengths.mean()), 1e-9))
        self.df: Counter[str] = Counter()
        for c in self.counts:
            self.df.update(c.keys())

    def idf(self, term: str) -> float:
        n, df = len(self.counts), self.df.get(term, 0)
        return math.log(1.0 + (n - df + 0.5) / (df + 0.5))

    def scores(self, query: str) -> np.ndarray:
        """Each document's BM25 score for ``query`` (query terms counted once each)."""
        out = np.zeros(len(self.counts), dtype=np.float64)
        for term in set(self.terms(query)):
            if term not in self.df:
                continue
            idf = self.idf(term)
            for row, c in enumerate(self.counts):
                tf = c.get(term, 0)
                if tf:
                    out[row] += idf * tf * (self.k1 + 1.0) / (tf + self.norm[row])
        return out

    def rank(self, query: str, k: int) -> list[int]:
        """The ``k`` best rows with a score above 0 (ties: row order)."""
        scores = self.scores(query)
        order = np.argsort(-scores, kind="stable")[:k]
        return [int(i) for i in order if scores[i] > 0]
