"""Updates before the values they replace: the last step of ``read_memory``'s ranking.

A chat model often writes a changed fact as a new memory ("用户搬家了，现在住在…")
instead of updating the old one, and a question in the old words ranks the
old value first. Two rules, both over the partition's cached rows (without
the partition index there is nothing to compare with, and the ranking stays as it is):

* **Any question** (:func:`~..core.ranking.supersedes`): when the first
  result and a newer one are each other's nearest memory in the partition and
  the newer one is at most ``margin`` farther from the query, the newer one
  goes first.
* **A question about the present** ("我现在住哪", "what's my wifi password now",
  :func:`~..core.ranking.asks_current`): a result among the first
  :data:`CURRENT_WINDOW` is an update when the memory it most likely replaced
  is older and says something else (another value,
  :func:`~..core.duplicates.values_conflict`). Which memory that is comes from
  the life topics (:mod:`~..core.topics`) the result shares with the question:
  its nearest memory on all of those topics, about the same people, wherever
  that one ranks ("用户在云帆物流上班" replaces "用户在拾光文化做测试工程师", which
  shares no word with "我现在的公司叫什么"). Without a shared topic, only its
  nearest older memory among the results counts. The update covering most of
  the question's topics goes first ("手机尾号": the new number, not the new
  phone), then the best-ranked. Measured on the recall benchmark, the plain
  nearest older memory was the wrong one for many updates: e5 puts
  "用户跳槽了，现在在…" next to "用户换了新手机，现在用…" (the same way of
  telling a change) and "搬家了，现在住在…" next to "老家在…". A question that
  does not ask for the present keeps its order (most facts have an older
  neighbour with other values, and only the question can say which one it is about).

Neither rule moves an update before a memory holding a number, code or
Latin word of the question, or a person it names ("我妈…"), that the update
lacks, nor, for a question that is just a name (``bare``, the first rule
only), before the memory holding all of it: a question about "A1037", "老周"
or the user's mother wants that memory.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..core.duplicates import values_conflict
from ..core.people import people_named, same_people
from ..core.ranking import KeywordIndex, asks_current, parse_time, supersedes, tokenize
from ..core.records import MemoryRecord
from ..core.topics import topics_of

__all__ = ["CURRENT_WINDOW", "MIN_GAP_SECONDS", "PEOPLE_TRIES", "Neighbours", "newer_first"]

CURRENT_WINDOW = 5
"""Results among which a question about the present looks for an update and its old value."""

PEOPLE_TRIES = 8
"""Nearest memories on a topic looked through for one about the same people."""

MIN_GAP_SECONDS = 3600.0
"""An update is at least this much newer than the value it replaces (not two
facts told in one conversation)."""

Age = Callable[[MemoryRecord], float]
"""Days since a memory was last written."""


class Neighbours:
    """Nearest rows within one cached partition, computed on demand and remembered
    (one matrix-vector product per row asked; norms and times once per entry)."""

    def __init__(self, entry: Any) -> None:
        self.vectors = entry.vectors  # the whole partition: a nearest neighbour needs it
        self.documents: list[str | None] = entry.documents
        norms = entry.derived.get("norms")
        if norms is None:
            norms = np.einsum("ij,ij->i", self.vectors, self.vectors)
            entry.derived["norms"] = norms
        self.norms = norms
        stamps = entry.derived.get("stamps")
        if stamps is None:
            stamps = np.array([_stamp(m) for m in entry.metadatas], dtype=np.float64)
            entry.derived["stamps"] = stamps
        self.stamps: np.ndarray = stamps
        self.known: dict[int, int] = {}
        self.known_older: dict[int, int] = {}

    def _distances(self, row: int) -> np.ndarray:
        dist = self.norms - 2.0 * (self.vectors @ self.vectors[row])
        dist[row] = np.inf
        return dist

    def nearest(self, row: int) -> int:
        if row not in self.known:
            self.known[row] = int(np.argmin(self._distances(row)))
        return self.known[row]

    def mutual(self, i: int, j: int) -> bool:
        return self.nearest(i) == j and self.nearest(j) == i

    def nearest_older(self, row: int) -> int:
        """The nearest row written at least :data:`MIN_GAP_SECONDS` before ``row`` (-1: none)."""
        if row not in self.known_older:
            dist = self._distances(row)
            older = self.stamps <= self.stamps[row] - MIN_GAP_SECONDS
            if np.isnan(self.stamps[row]) or not older.any():
                self.known_older[row] = -1
            else:
                dist = np.where(older, dist, np.inf)
                self.known_older[row] = int(np.argmin(dist))
        return self.known_older[row]

    def previous_value(self, row: int, about: np.ndarray) -> int:
        """The memory ``row`` most likely replaced (-1: none): its nearest memory among
        the rows of ``about`` (a mask: the same topics) that names the same people,
        if that one is at least :data:`MIN_GAP_SECONDS` older."""
        dist = np.where(about, self._distances(row), np.inf)
        k = min(PEOPLE_TRIES, len(dist))
        nearest = np.argpartition(dist, k - 1)[:k]
        text = self.documents[row] or ""
        for other in nearest[np.argsort(dist[nearest])]:
            if not np.isfinite(dist[other]):
                break
            if same_people(self.documents[other] or "", text):
                return int(other) if self.stamps[other] <= self.stamps[row] - MIN_GAP_SECONDS else -1
        return -1


def _stamp(meta: dict[str, Any]) -> float:
    """A row's last write as epoch seconds (NaN when unreadable: never an update)."""
    parsed = parse_time(str(meta.get("updated_at") or meta.get("created_at") or ""))
    return parsed.timestamp() if parsed is not None else float("nan")


def _exact_tokens(text: str, latin: bool) -> set[str]:
    """Tokens a vector model blurs: numbers and codes; Latin words too in a question
    not written in Latin letters (a name "Mayday" in Chinese text)."""
    return {t for t in tokenize(text) if t.isascii() and (latin or not t.isalpha())}


class _Guard:
    """Whether an update may go before the first result (see the module docstring)."""

    def __init__(self, query: str, first: MemoryRecord, coverage: dict[str, float], bare: bool):
        self.first = first
        self.latin = not query.isascii()
        self.held = _exact_tokens(query, self.latin) & _exact_tokens(first.content, self.latin)
        self.people = people_named(query) & people_named(first.content)
        self.coverage = coverage
        self.bare = bare

    def allows(self, other: MemoryRecord) -> bool:
        if self.held - _exact_tokens(other.content, self.latin):
            return False
        if self.people - people_named(other.content):
            return False  # "我妈现在的手机号": the mother's memory, not the user's update
        full = self.coverage.get(self.first.id, 0.0) >= 0.99
        return not (self.bare and full and self.coverage.get(other.id, 0.0) < 0.99)


def _current_update(
    ranked: list[MemoryRecord],
    rows: dict[str, int],
    neighbours: Neighbours,
    guard: _Guard,
    asked: set[str],
    keywords: KeywordIndex | None,
) -> MemoryRecord | None:
    """The update among the first results that the question most likely asks for and
    that is not itself replaced by another of them (v1 <- v2 <- v3: v3); see the module
    docstring. ``asked``: the question's topics."""
    window = [r for r in ranked[:CURRENT_WINDOW] if r.id in rows]
    in_window = {rows[r.id] for r in window}
    replaced: set[int] = set()
    updates: list[tuple[int, int, MemoryRecord]] = []  # (-topics of the question, rank, update)
    for rank, record in enumerate(window):
        row = rows[record.id]
        about = topics_of(record.content)
        if asked:
            about &= asked
        if about and keywords is not None:
            older, covered = neighbours.previous_value(row, keywords.on_topics(about)), len(about)
        elif asked:
            continue  # not about what the question asks
        else:
            older, covered = neighbours.nearest_older(row), 0
            if older not in in_window:
                continue
        if older < 0:
            continue
        old = neighbours.documents[older] or ""
        if values_conflict(old, record.content) and same_people(old, record.content):
            updates.append((-covered, rank, record))
            replaced.add(older)
    for _, _, record in sorted(updates, key=lambda u: u[:2]):
        if rows[record.id] not in replaced and guard.allows(record):
            return record
    return None


def newer_first(
    entry: Any,
    ranked: list[MemoryRecord],
    query: str,
    coverage: dict[str, float],
    *,
    keywords: KeywordIndex | None,
    bare: bool,
    candidates: int,
    margin: float,
    age: Age,
) -> list[MemoryRecord]:
    """``ranked`` with an update moved before the value it replaces (see the module
    docstring); ``keywords``: the partition's keyword index (its topic tokens)."""
    if entry is None or len(ranked) < 2 or len(entry.ids) < 2:
        return ranked
    rows = {memory_id: r for r, memory_id in enumerate(entry.ids)}
    neighbours = Neighbours(entry)
    ranked = list(ranked)
    if asks_current(query):
        # Not the "bare" guard: a question about the present is not just a name.
        guard = _Guard(query, ranked[0], coverage, False)
        found = _current_update(ranked, rows, neighbours, guard, topics_of(query), keywords)
        if found is not None and found is not ranked[0]:
            ranked.remove(found)
            ranked.insert(0, found)
        return ranked
    for _ in range(3):  # a chain of updates: v1 <- v2 <- v3
        first = ranked[0]
        if first.distance is None or first.id not in rows:
            break
        guard = _Guard(query, first, coverage, bare)
        found = None
        for other in ranked[1:candidates]:
            if other.distance is None or other.id not in rows or not guard.allows(other):
                continue
            if supersedes(
                first.distance,
                other.distance,
                age(first),
                age(other),
                mutual_nearest=True,
                margin=margin,
            ) and neighbours.mutual(rows[first.id], rows[other.id]):
                found = other
                break
        if found is None:
            break
        ranked.remove(found)
        ranked.insert(0, found)
    return ranked


