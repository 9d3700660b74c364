"""Figures of the time benchmark: per split and question group, each ranking beside plain cosine.

R@k is the share of questions with an answer memory among the first k results of a ranking;
"topic first" the share whose answer comes before every other memory of its topic (the
issue's "the period's memory comes first among same-topic memories"); "date shown" the
share with an answer in the top 5 whose shown date is the local day it was said; "newest
first" (facts that change, "now" questions) the share whose newest version comes before the
older ones it replaced. Splits: dev (where rules may be tuned) and held-out (only checked).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .recall_report import _table
from .time_run import DEFAULT, DENSE, LINKED, NO_TIME, RECALL, SHOWN_BLOCK, SHOWN_READ, Asked

__all__ = ["at_k", "format_evolving", "format_locomo", "format_temporal", "format_zh"]

Column = tuple[str, Callable[[Sequence[Asked]], str]]


def at_k(asked: Sequence[Asked], ranking: str, k: int) -> float | None:
    """R@k of ``ranking`` over the questions it answered (``None``: it asked none)."""
    ranks = [a.ranks[ranking] for a in asked if ranking in a.ranks]
    if not ranks:
        return None
    return sum(r is not None and r <= k for r in ranks) / len(ranks)


def _share(values: Sequence[bool]) -> float | None:
    return sum(values) / len(values) if values else None


def _f(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _delta(a: float | None, b: float | None) -> str:
    return "—" if a is None or b is None else f"{(a - b) * 100:+.1f}"


def _r(ranking: str, k: int) -> Column:
    return f"{ranking} R@{k}", lambda qs: _f(at_k(qs, ranking, k))


def _d(ranking: str, k: int) -> Column:
    return f"Δ@{k}", lambda qs: _delta(at_k(qs, ranking, k), at_k(qs, DENSE, k))


def _topic(ranking: str) -> Column:
    return f"{ranking} topic first", lambda qs: _f(
        _share([a.topic_first[ranking] for a in qs if ranking in a.topic_first])
    )


def _shown(where: str) -> Column:
    return f"date shown ({where})", lambda qs: _f(_share([a.shown[where] for a in qs]))


def _newest(ranking: str) -> Column:
    return f"{ranking} newest first", lambda qs: _f(
        _share([a.newest[ranking] for a in qs if ranking in a.newest])
    )


def _rows(
    asked: Sequence[Asked], columns: Sequence[Column], key: Callable[[Asked], str]
) -> list[list[str]]:
    rows = []
    for split in ("dev", "held-out", "all"):
        mine = [a for a in asked if split in ("all", a.split)]
        for group in sorted({key(a) for a in mine}):
            of = [a for a in mine if key(a) == group]
            rows.append([split, group, str(len(of)), *(fn(of) for _, fn in columns)])
        if mine:
            rows.append([split, "all", str(len(mine)), *(fn(mine) for _, fn in columns)])
    return rows


def _render(
    asked: Sequence[Asked], columns: Sequence[Column], key: Callable[[Asked], str], markdown: bool
) -> str:
    header = ["split", "group", "n", *(name for name, _ in columns)]
    return "\n".join(_table(header, _rows(asked, columns, key), markdown))


def format_locomo(asked: Sequence[Asked], *, markdown: bool = False) -> str:
    """Per category: the default ranking against dense at 1/5/10, then the other rankings at 5."""
    columns = [
        *(_r(DEFAULT, k) for k in (1, 5, 10)),
        *(_r(DENSE, k) for k in (1, 5, 10)),
        *(_d(DEFAULT, k) for k in (1, 5, 10)),
        _r(NO_TIME, 5),
        _r(RECALL, 5),
    ]
    return _render(asked, columns, lambda a: a.group, markdown)


def format_temporal(asked: Sequence[Asked], *, markdown: bool = False) -> str:
    """Category 2 alone: evidence in the top 5, and in the top 5 with its date shown."""
    temporal = [a for a in asked if a.group.startswith("2 ")]
    columns = [_r(DENSE, 5), _r(DEFAULT, 5), _shown(SHOWN_READ), _r(RECALL, 5), _shown(SHOWN_BLOCK)]
    return _render(temporal, columns, lambda a: a.group, markdown)


def _zh_group(a: Asked) -> str:
    counter = ", counter-example" if a.counter else ""
    return f"{a.group} {a.lang}{counter}"


def format_zh(asked: Sequence[Asked], *, markdown: bool = False) -> str:
    columns = [
        _r(DENSE, 1),
        _r(DEFAULT, 1),
        _r(NO_TIME, 1),
        _r(RECALL, 1),
        _r(DENSE, 5),
        _r(DEFAULT, 5),
        _topic(DENSE),
        _topic(DEFAULT),
        _shown(SHOWN_READ),
        _shown(SHOWN_BLOCK),
    ]
    return _render(asked, columns, _zh_group, markdown)


def format_evolving(asked: Sequence[Asked], *, markdown: bool = False) -> str:
    columns = [
        _r(DENSE, 1),
        _r(DEFAULT, 1),
        _r(LINKED, 1),
        _newest(DENSE),
        _newest(DEFAULT),
        _newest(LINKED),
        _r(DENSE, 3),
        _r(DEFAULT, 3),
    ]
    return _render(asked, columns, lambda a: f"{a.group} {a.lang}", markdown)
