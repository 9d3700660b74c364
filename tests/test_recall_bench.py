"""The recall benchmark's quick mode runs end to end on the real model (in-process).

Not the targets (those are the benchmark's job): only that the plugin's own
write and read path answers every query without a memory of another user
and that the report prints. All retrieval features are on (hybrid, dedup,
decay): the keyword channel and dedup-on-write are where a partition filter
could be forgotten.
"""

from __future__ import annotations

from pathlib import Path

from bench.recall_bench import run_steps
from bench.recall_data import KINDS, QUICK, make_recall_dataset
from bench.recall_report import format_misses, format_report
from bench.recall_run import STEPS


async def test_quick_recall_bench_has_no_leakage_and_prints(tmp_path: Path) -> None:
    data = make_recall_dataset(4, QUICK)
    assert {u.lang for u in data.users} == {"zh", "en"}  # user 3 chats in English
    assert min(data.counts().values()) > 0
    # Every user also asks for another user's exact tokens, found only in that
    # user's partition: a keyword channel that ignored the partition returns them.
    assert data.probes >= 4
    results = await run_steps(data, [STEPS[-1]], tmp_path, "local")

    result = results[0]
    assert result.leaks == []
    assert result.results_checked >= sum(data.counts().values())
    assert len(result.outcomes) == sum(data.counts().values()) + data.probes
    assert len(result.sizes) == 4 and all(size > 0 for size in result.sizes)
    assert len(result.embed_s) == len(result.search_s) == len(result.outcomes)
    table = format_report(results)
    for kind in KINDS:
        assert f"{STEPS[-1].name}" in table and kind in table
    assert "foreign results" in table and "0 of " in table
    assert "Misses at rank 1" in format_misses(result)
    markdown = format_report(results, markdown=True)
    assert markdown.count("| +decay |") == len(KINDS) + 1
