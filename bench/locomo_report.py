"""Figures of the LoCoMo benchmark: recall@1/5/10, ``read_memory`` beside the dense baseline.

Recall@k is the share of questions with a memory of an evidence turn among
the first k results. Splits: the first ``dev`` conversations (where any
ranking rule may be tuned) and the rest (held out: checked, never tuned on).
Target (issue 23): the ranking at least 3 points above the baseline at @5 and
never below it at @1 or @10, on the dev split and on the held-out split.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .locomo_data import CATEGORIES
from .locomo_run import Answer, RunResult
from .recall_report import _table
from .stats import Summary

__all__ = ["KS", "Recall", "Split", "format_report", "format_variants", "recall", "splits"]

KS = (1, 5, 10)
TARGET_GAIN_AT_5 = 0.03


@dataclass(frozen=True, slots=True)
class Recall:
    """Recall@k of one group of questions for both rankings."""

    n: int
    ours: tuple[float, ...]  # at KS
    dense: tuple[float, ...]

    @property
    def gains(self) -> tuple[float, ...]:
        return tuple(o - d for o, d in zip(self.ours, self.dense, strict=True))

    def meets_target(self) -> bool:
        g1, g5, g10 = self.gains
        # Rounded: a figure equal at three decimals is not "below".
        return round(g5, 9) >= TARGET_GAIN_AT_5 and round(g1, 9) >= 0 and round(g10, 9) >= 0


@dataclass(frozen=True, slots=True)
class Split:
    name: str
    conversations: tuple[int, ...]  # indexes into the run's conversations


def _at(ranks: Sequence[int | None], k: int) -> float:
    return sum(r is not None and r <= k for r in ranks) / len(ranks) if ranks else 0.0


def recall(answers: Sequence[Answer]) -> Recall:
    ours = [a.rank for a in answers]
    dense = [a.dense for a in answers]
    return Recall(len(answers), tuple(_at(ours, k) for k in KS), tuple(_at(dense, k) for k in KS))


def splits(count: int, dev: int) -> list[Split]:
    """``dev`` (the first ``dev`` conversations), ``held-out`` (the rest) and ``all``."""
    dev = max(0, min(dev, count))
    out = []
    if dev:
        out.append(Split(f"dev (1–{dev})", tuple(range(dev))))
    if dev < count:
        out.append(Split(f"held-out ({dev + 1}–{count})", tuple(range(dev, count))))
    out.append(Split(f"all (1–{count})", tuple(range(count))))
    return out


def _f(value: float) -> str:
    return f"{value:.3f}"


def _gain(value: float) -> str:
    return f"{value * 100:+.1f}"


def _cells(fig: Recall) -> list[str]:
    return [
        str(fig.n),
        *map(_f, fig.ours),
        *map(_f, fig.dense),
        *map(_gain, fig.gains),
    ]


_FIG_HEADER = [
    "n",
    "R@1",
    "R@5",
    "R@10",
    "dense R@1",
    "dense R@5",
    "dense R@10",
    "Δ@1",
    "Δ@5",
    "Δ@10",
]


def _category_rows(
    answers: Sequence[Answer], split: Split, categories: Mapping[int, str]
) -> list[list[str]]:
    mine = [a for a in answers if a.conversation in split.conversations]
    rows = []
    for category, name in categories.items():
        of_cat = [a for a in mine if a.category == category]
        if of_cat:
            rows.append([split.name, f"{category} {name}", *_cells(recall(of_cat)), ""])
    total = recall(mine)
    verdict = "PASS" if total.meets_target() else "FAIL"
    rows.append([split.name, "all", *_cells(total), verdict])
    return rows


def format_report(
    result: RunResult,
    names: Sequence[str],
    dev: int,
    *,
    markdown: bool = False,
    categories: Mapping[int, str] = CATEGORIES,
    unit: str = "conversation",
) -> str:
    """Per split and category, then per conversation (``unit``); then merges, latency, leakage."""
    rows: list[list[str]] = []
    for split in splits(len(names), dev):
        rows += _category_rows(result.answers, split, categories)
    target = "Δ@5 ≥ +3, Δ@1/Δ@10 ≥ 0"
    lines = _table(["split", "category", *_FIG_HEADER, target], rows, markdown)
    per_conv = []
    for index, name in enumerate(names):
        mine = [a for a in result.answers if a.conversation == index]
        where = "dev" if index < dev else "held-out"
        size = result.memories[index] if index < len(result.memories) else 0
        per_conv.append([f"{index + 1} {name}", where, str(size), *_cells(recall(mine))])
    lines += ["", *_table([unit, "split", "memories", *_FIG_HEADER], per_conv, markdown)]
    embed, search = Summary.of(result.embed_s), Summary.of(result.search_s)
    lines += [
        "",
        f"Δ = ranking − dense, in points. {result.written} memories written, "
        f"{result.merged} merged into an earlier memory on write (dedup).",
        f"read_memory: embedding call p50 {embed.p50 * 1000:.1f} / p95 {embed.p95 * 1000:.1f} ms; "
        f"overhead beyond embedding p50 {search.p50 * 1000:.1f} / p95 {search.p95 * 1000:.1f} ms.",
        f"foreign results: {len(result.leaks)}",
    ]
    return "\n".join(lines)


def format_variants(
    result: RunResult, names: Sequence[str], dev: int, *, markdown: bool = False
) -> str:
    """One row per channel variant and split (the default ranking last), Δ against dense."""
    rows: list[list[str]] = []
    runs = [*result.variants.items(), ("default", result.answers)]
    for split in splits(len(names), dev):
        for name, answers in runs:
            mine = [a for a in answers if a.conversation in split.conversations]
            fig = recall(mine)
            rows.append([name, split.name, str(fig.n), *map(_f, fig.ours), *map(_gain, fig.gains)])
    header = ["ranking", "split", "n", "R@1", "R@5", "R@10", "Δ@1", "Δ@5", "Δ@10"]
    return "\n".join(_table(header, rows, markdown))
