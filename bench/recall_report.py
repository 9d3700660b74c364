"""Figures of the recall benchmark: recall@1, recall@5 and MRR per kind, latency, leakage.

Targets (issue 15): paraphrased questions recall@5 ≥ 0.95 and recall@1 ≥ 0.80;
exact tokens, alone and inside a sentence, recall@1 ≥ 0.95; the current value
first in ≥ 0.95 of "latest value" questions; ``read_memory`` overhead beyond
the embedding call ≤ 5 ms p95 (at ~50 memories per partition); no
cross-partition leakage.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .recall_data import KINDS
from .recall_run import Outcome, StepResult
from .stats import Summary

__all__ = ["KindFigures", "figures", "format_misses", "format_report"]

TARGETS: dict[str, tuple[tuple[str, float], ...]] = {
    "paraphrase": (("R@1", 0.80), ("R@5", 0.95)),
    "exact": (("R@1", 0.95),),
    "token_in_sentence": (("R@1", 0.95),),
    "latest": (("R@1", 0.95),),
}
OVERHEAD_P95_MS = 5.0


@dataclass(frozen=True, slots=True)
class KindFigures:
    n: int
    r1: float
    r5: float
    mrr: float

    def value(self, metric: str) -> float:
        return self.r1 if metric == "R@1" else self.r5

    def passes(self, kind: str) -> bool:
        return all(self.value(m) >= t for m, t in TARGETS[kind])


def figures(outcomes: Sequence[Outcome], kind: str) -> KindFigures:
    ranks = [o.rank for o in outcomes if o.kind == kind]
    n = len(ranks)
    if n == 0:
        return KindFigures(0, 0.0, 0.0, 0.0)
    return KindFigures(
        n,
        sum(r == 1 for r in ranks) / n,
        sum(r is not None for r in ranks) / n,
        sum(1 / r for r in ranks if r is not None) / n,
    )


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def _target_text(kind: str) -> str:
    return " ".join(f"{m}≥{t:.2f}" for m, t in TARGETS[kind])


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], markdown: bool) -> list[str]:
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        return lines + ["| " + " | ".join(r) + " |" for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    fmt = "  ".join(f"{{:{w}}}" for w in widths)
    lines = [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
    return lines + [fmt.format(*r) for r in rows]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def recall_rows(results: Sequence[StepResult]) -> list[list[str]]:
    rows = []
    for res in results:
        for kind in KINDS:
            f = figures(res.outcomes, kind)
            rows.append(
                [
                    res.step.name,
                    kind,
                    str(f.n),
                    f"{f.r1:.3f}",
                    f"{f.r5:.3f}",
                    f"{f.mrr:.3f}",
                    _target_text(kind),
                    _verdict(f.passes(kind)),
                ]
            )
    return rows


def latency_rows(results: Sequence[StepResult]) -> list[list[str]]:
    rows = []
    for res in results:
        emb, search = Summary.of(res.embed_s), Summary.of(res.search_s)
        size = sum(res.sizes) / max(len(res.sizes), 1)
        merges = f"{res.repeats_merged}/{res.repeats}"
        if res.false_merges:
            merges += f" (+{len(res.false_merges)} wrong)"
        leak_ok = not res.leaks
        rows.append(
            [
                res.step.name,
                f"{size:.1f}",
                merges,
                f"{_ms(emb.p50)} / {_ms(emb.p95)}",
                f"{_ms(search.p50)} / {_ms(search.p95)}",
                _verdict(search.p95 * 1000 <= OVERHEAD_P95_MS),
                f"{len(res.leaks)} of {res.results_checked}",
                _verdict(leak_ok),
            ]
        )
    return rows


def format_report(results: Sequence[StepResult], *, markdown: bool = False) -> str:
    """The two tables: recall per step and kind; sizes, merges, latency and leakage per step."""
    out = ["Recall (top_k 5; targets from issue 15)", ""]
    out += _table(
        ["step", "kind", "n", "R@1", "R@5", "MRR", "target", "verdict"],
        recall_rows(results),
        markdown,
    )
    out += ["", "Writes, read latency (ms, p50 / p95) and leakage", ""]
    out += _table(
        [
            "step",
            "memories/partition",
            "repeats merged",
            "embedding call",
            "overhead beyond embedding",
            f"≤ {OVERHEAD_P95_MS:.0f} ms p95",
            "foreign results",
            "leakage 0",
        ],
        latency_rows(results),
        markdown,
    )
    return "\n".join(out)


def format_misses(result: StepResult, per_kind: int = 5) -> str:
    """Misses at rank 1 of one step, a few per kind (query, expected, what came back)."""
    out = [f"Misses at rank 1 of step {result.step.name}"]
    for kind in KINDS:
        misses = [o for o in result.outcomes if o.kind == kind and o.rank != 1]
        total = sum(o.kind == kind for o in result.outcomes)
        out.append(f"  {kind}: {len(misses)} of {total}")
        for o in misses[:per_kind]:
            where = "not in top 5" if o.rank is None else f"rank {o.rank}"
            out.append(f"    user {o.user}  Q: {o.query}  ({where})")
            out.append(f"      expected: {o.expected}")
            for i, text in enumerate(o.got[:3], start=1):
                out.append(f"      got {i}: {text}")
    if result.false_merges:
        out.append(f"  wrong merges: {len(result.false_merges)}")
        out += [f"    {m}" for m in result.false_merges[:per_kind]]
    if result.leaks:
        out.append(f"  LEAKS: {len(result.leaks)}")
        out += [f"    {m}" for m in result.leaks[:per_kind]]
    return "\n".join(out)
