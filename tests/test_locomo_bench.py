"""The LoCoMo benchmark's logic on a tiny data set written here (made up, not LoCoMo's text).

The loader (which questions count, turn ids, dates, "now"), the recall
arithmetic and its report, and one end-to-end run through the plugin's own
write and read path on the real model (in-process), beside the dense baseline.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bench.locomo_bench import main as locomo_main
from bench.locomo_data import load_conversations, parse_turns
from bench.locomo_report import Recall, format_report, recall, splits
from bench.locomo_run import TOP_K, Answer, RunResult, run_locomo
from bench.recall_run import embedder_env


def _obs(text: str, dia: list[str], date: str) -> dict[str, Any]:
    return {"text": text, "dia": dia, "session_date": date, "speaker": "x"}


def _qa(question: str, evidence: list[str], category: int) -> dict[str, Any]:
    return {"question": question, "answer": "-", "evidence": evidence, "category": category}


S1, S2 = "10:00 am on 3 March, 2024", "4:30 pm on 20 April, 2024"

TINY: dict[str, Any] = {
    "source": "made up for this test",
    "conversations": [
        {
            "sample_id": "tiny-en",
            "speakers": ["Ana", "Bo"],
            "observations": [
                _obs("Bo finished the Lisbon marathon in under four hours.", ["D2:3"], S2),
                _obs("Ana adopted a grey kitten named Pixel.", ["D1:2"], S1),
                _obs("Bo started training for a marathon in Lisbon.", ["D1:5"], S1),
                _obs("Ana works as a pastry chef at a bakery downtown.", ["D1:7"], S1),
                _obs(
                    "Ana baked a three-layer lemon cake for her sister's wedding.",
                    ["D2:6", "D2:7"],
                    S2,
                ),
                _obs("Bo bought a second-hand road bike.", ["D2:9"], S2),
            ],
            "qa": [
                _qa("What is the name of Ana's kitten?", ["D1:2"], 4),
                _qa("When did Bo finish the marathon?", ["D2:3"], 2),
                _qa("What did Ana bake for the wedding?", ["D2:7"], 1),
                _qa("Is Bo a good cook?", ["D3:1"], 3),  # no observation: skipped
                _qa("What is Ana's favourite colour?", [], 5),  # adversarial: left out
            ],
        },
        {
            "sample_id": "tiny-zh",
            "observations": [
                _obs("小林在杭州开了一家咖啡馆，店名叫半糖。", ["D1:3"], S1),
                _obs("小林的狗叫豆包，是一只柯基。", ["D1:4"], S1),
                _obs("小林报名了十月的西湖半程马拉松。", ["D2:1"], S2),
            ],
            "qa": [
                _qa("小林的咖啡馆叫什么名字？", ["D:1:3"], 4),  # LoCoMo has such a typo
                _qa("小林养的是什么狗？", ["D1:4; D2:1"], 1),  # two turns in one string
            ],
        },
    ],
}


def _write_tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny_observations.json"
    path.write_text(json.dumps(TINY, ensure_ascii=False), encoding="utf-8")
    return path


def test_loader_keeps_answerable_questions_of_categories_1_to_4(tmp_path: Path) -> None:
    en, zh = load_conversations(_write_tiny(tmp_path))
    assert [q.category for q in en.questions] == [4, 2, 1]
    assert en.skipped == 1  # "Is Bo a good cook?" (category 5 is not counted at all)
    assert [o.when for o in en.observations] == sorted(o.when for o in en.observations)
    assert en.observations[0].text == "Ana adopted a grey kitten named Pixel."
    assert en.now == datetime(2024, 4, 21, 16, 30, tzinfo=UTC)  # a day after the last session
    assert zh.questions[0].evidence == frozenset({"D1:3"})
    assert zh.questions[1].evidence == frozenset({"D1:4", "D2:1"})
    assert parse_turns("D8:6; D9:17") == frozenset({"D8:6", "D9:17"})
    assert parse_turns(["D"]) == frozenset()


def test_recall_arithmetic_and_target() -> None:
    answers = [
        Answer(0, 4, rank=1, dense=2),
        Answer(0, 4, rank=3, dense=1),
        Answer(1, 2, rank=None, dense=None),
        Answer(1, 1, rank=7, dense=None),
    ]
    fig = recall(answers)
    assert fig.n == 4
    assert fig.ours == pytest.approx((0.25, 0.5, 0.75))
    assert fig.dense == pytest.approx((0.25, 0.5, 0.5))
    assert fig.gains == pytest.approx((0.0, 0.0, 0.25))
    assert not fig.meets_target()  # @5 not 3 points ahead
    assert Recall(10, (0.5, 0.83, 0.9), (0.5, 0.8, 0.9)).meets_target()
    assert not Recall(10, (0.49, 0.9, 0.9), (0.5, 0.8, 0.9)).meets_target()  # below at @1
    assert not Recall(10, (0.5, 0.9, 0.89), (0.5, 0.8, 0.9)).meets_target()  # below at @10
    assert [(s.name, s.conversations) for s in splits(5, 3)] == [
        ("dev (1–3)", (0, 1, 2)),
        ("held-out (4–5)", (3, 4)),
        ("all (1–5)", (0, 1, 2, 3, 4)),
    ]
    assert [s.conversations for s in splits(2, 0)] == [(0, 1), (0, 1)]  # all held out


def test_report_rows_carry_the_recall_of_their_questions() -> None:
    result = RunResult(
        answers=[Answer(0, 4, 1, 1), Answer(0, 2, 6, None), Answer(1, 4, 2, 9)],
        written=5,
        memories=[3, 2],
    )
    report = format_report(result, ["a", "b"], dev=1, markdown=True)
    rows = {tuple(c.strip() for c in line.split("|")[1:3]): line for line in report.splitlines()}
    # dev = conversation a: ranks 1 and 6 (R@1 0.5, R@5 0.5, R@10 1.0); dense 1 and none.
    assert (
        "| 2 | 0.500 | 0.500 | 1.000 | 0.500 | 0.500 | 0.500 | +0.0 | +0.0 | +50.0 | FAIL |"
        in (rows[("dev (1–1)", "all")])
    )
    # held-out = conversation b: rank 2 against dense 9.
    assert (
        "| 1 | 0.000 | 1.000 | 1.000 | 0.000 | 0.000 | 1.000 | +0.0 | +100.0 | +0.0 | PASS |"
        in (rows[("held-out (2–2)", "all")])
    )
    assert "4 single-hop" in report and "3 open-domain" not in report  # no such question


async def test_absent_data_is_said_and_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await locomo_main(["--data", str(tmp_path / "nothing.json")]) == 0
    assert "absent" in capsys.readouterr().out


async def test_tiny_run_through_read_memory_and_the_dense_baseline(tmp_path: Path) -> None:
    convs = load_conversations(_write_tiny(tmp_path))
    result = await run_locomo(convs, tmp_path / "run", embedder_env("local", "", "e5"))
    assert result.leaks == []
    assert result.written == 9 and sum(result.memories) == 9 - result.merged
    assert len(result.answers) == 5
    assert [a.conversation for a in result.answers] == [0, 0, 0, 1, 1]
    assert [a.category for a in result.answers] == [4, 2, 1, 4, 1]
    # Every partition is smaller than TOP_K: an evidence memory is always found.
    assert sum(result.memories) < 2 * TOP_K
    assert all(a.rank is not None and a.dense is not None for a in result.answers)
    kitten, _, cake, cafe, _ = result.answers
    # The question names what only its evidence says ("kitten", "wedding", "咖啡馆").
    assert (kitten.rank, kitten.dense) == (1, 1)
    assert cake.rank == 1
    assert (cafe.rank, cafe.dense) == (1, 1)
    report = format_report(result, [c.name for c in convs], dev=1)
    assert "tiny-en" in report and "tiny-zh" in report and "foreign results: 0" in report
