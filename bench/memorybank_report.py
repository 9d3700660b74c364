"""Figures of active recall on MemoryBank-CN: the ``<MEMORIES>`` block at each threshold.

For a threshold t (``recall_min_similarity``, which applies to messages with CJK
characters): *related in block* = share of questions whose block (rendered at
t) holds one of their evidence turns; *unrelated with a block* = share of
unrelated messages (chit-chat lines; questions in another user's partition)
that get any block. Dev and held-out users apart; the dev optimum (largest
related − unrelated) is printed beside the configured default.
"""

from __future__ import annotations

from collections.abc import Sequence

from .locomo_report import Split, splits
from .memorybank_run import Probe, RecallResult, in_block
from .recall_report import _table

__all__ = ["THRESHOLDS", "dev_optimum", "format_recall", "shares"]

THRESHOLDS = [round(0.80 + 0.01 * i, 2) for i in range(15)]


def _share(probes: Sequence[Probe], threshold: float, max_chars: int, *, found: bool) -> float:
    if not probes:
        return 0.0
    return sum(in_block(p, threshold, max_chars)[found] for p in probes) / len(probes)


def shares(result: RecallResult, split: Split, threshold: float) -> tuple[float, float, float]:
    """(related in block, chit-chat with a block, foreign questions with a block) of ``split``."""
    mine = set(split.conversations)

    def of(probes: list[Probe]) -> list[Probe]:
        return [p for p in probes if p.user in mine]

    m = result.max_chars
    return (
        _share(of(result.related), threshold, m, found=True),
        _share(of(result.chat), threshold, m, found=False),
        _share(of(result.foreign), threshold, m, found=False),
    )


def dev_optimum(result: RecallResult, split: Split) -> float:
    """The threshold with the largest related in block − unrelated with a block (pooled)."""

    def score(t: float) -> float:
        related, chat, foreign = shares(result, split, t)
        n_chat = sum(p.user in split.conversations for p in result.chat)
        n_foreign = sum(p.user in split.conversations for p in result.foreign)
        unrelated = (chat * n_chat + foreign * n_foreign) / max(1, n_chat + n_foreign)
        return related - unrelated

    return max(THRESHOLDS, key=score)


def format_recall(
    result: RecallResult, count: int, dev: int, default: float, *, markdown: bool = False
) -> str:
    groups = [s for s in splits(count, dev) if not s.name.startswith("all") or dev in (0, count)]
    header = ["threshold"]
    for s in groups:
        n_rel = sum(p.user in s.conversations for p in result.related)
        n_chat = sum(p.user in s.conversations for p in result.chat)
        n_for = sum(p.user in s.conversations for p in result.foreign)
        header += [
            f"{s.name}: related in block ({n_rel})",
            f"chit-chat with a block ({n_chat})",
            f"other user's questions with a block ({n_for})",
        ]
    rows = []
    for t in THRESHOLDS:
        mark = f"{t:.2f}" + (" (default)" if abs(t - default) < 1e-9 else "")
        cells = [mark]
        for s in groups:
            cells += [f"{x:.3f}" for x in shares(result, s, t)]
        rows.append(cells)
    lines = _table(header, rows, markdown)
    best = dev_optimum(result, groups[0])
    lines += [
        "",
        f"active recall: top_k {result.top_k}, max_chars {result.max_chars}; "
        f"dev optimum (largest related − unrelated, {groups[0].name}): {best:.2f}; "
        f"default recall_min_similarity {default:.2f}",
    ]
    return "\n".join(lines)
