"""The score of ``read_memory``: vector closeness plus keyword coverage, and age decay.

Pure functions (no storage, no framework) so that the ranking and the
benchmark compute the same thing. The keyword coverage comes from
:class:`~.keywords.KeywordIndex`; :func:`parse_time` also reads the stamps
the archive sweep compares.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

__all__ = ["age_days", "combine", "decay_factor", "decayed_distance", "parse_time"]


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
