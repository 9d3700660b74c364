"""The MemoryBank-CN benchmark's logic on a tiny data set written here (made up, not the dataset's).

The loader (which questions count, dates, "names a time"), active recall's
block at a threshold, and one end-to-end run through the plugin's own write and
read path on the real model (in-process), beside the dense baseline and with
the channel variants and active recall.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bench.locomo_report import format_report, format_variants
from bench.locomo_run import CHANNEL_VARIANTS
from bench.memorybank_bench import main as memorybank_main
from bench.memorybank_data import CATEGORIES, NAMES_A_TIME, NO_TIME, load_users, names_a_time
from bench.memorybank_report import format_recall, shares
from bench.memorybank_run import Hit, Probe, in_block, run_memorybank
from bench.recall_run import embedder_env


def _turn(turn_id: str, date: str, text: str) -> dict[str, str]:
    return {"id": turn_id, "date": date, "text": text}


TINY: dict[str, Any] = {
    "source": "made up for this test",
    "users": [
        {
            "user": "小林",
            "turns": [
                _turn("D2:1", "2024-03-04", "今天我去西湖边跑了十公里，累坏了。"),
                _turn("D1:1", "2024-03-03", "你好，我叫小林，在杭州开了一家咖啡馆。"),
                _turn("D1:2", "2024-03-03", "我养了一只柯基，名字叫豆包。"),
                _turn("D2:2", "2024-03-04", "晚上我做了一道红烧肉。"),
            ],
            "qa": [
                {"question": "我的狗叫什么名字？", "evidence": ["D1:2"], "answer": "豆包"},
                {"question": "在3月4号我做了什么菜？", "evidence": ["D2:2"], "answer": "红烧肉"},
                {"question": "你给我推荐过什么书？", "evidence": [], "answer": "-"},
            ],
        },
        {
            "user": "阿梅",
            "turns": [
                _turn("D1:1", "2024-03-03", "我最近在学弹吉他，每天练一个小时。"),
                _turn("D1:2", "2024-03-03", "我最喜欢的歌手是陈奕迅。"),
            ],
            "qa": [{"question": "我喜欢哪个歌手？", "evidence": ["D1:2"], "answer": "陈奕迅"}],
        },
    ],
}


def _write_tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny_memorybank.json"
    path.write_text(json.dumps(TINY, ensure_ascii=False), encoding="utf-8")
    return path


def test_loader_keeps_questions_with_evidence_and_orders_turns(tmp_path: Path) -> None:
    lin, mei = load_users(_write_tiny(tmp_path))
    assert lin.name == "小林" and mei.name == "阿梅"
    assert [q.text for q in lin.questions] == ["我的狗叫什么名字？", "在3月4号我做了什么菜？"]
    assert lin.skipped == 1  # answered only by the AI: no memory can hold it
    assert [q.category for q in lin.questions] == [NO_TIME, NAMES_A_TIME]
    texts = [o.text for o in lin.observations]
    assert texts[0].startswith("你好") and texts[-1] == "晚上我做了一道红烧肉。"
    assert lin.observations[0].when == datetime(2024, 3, 3, 12, 1, tzinfo=UTC)
    assert lin.now == datetime(2024, 3, 5, 12, 2, tzinfo=UTC)  # a day after the last turn
    assert names_a_time("我们第一次对话的时候聊了什么？")
    assert names_a_time("5月2号那天我心情怎么样")
    assert not names_a_time("我喜欢哪些菜系？")


def test_the_block_at_a_threshold_is_the_rendered_one() -> None:
    probe = Probe(0, "q", (Hit("2024-03-03", "a", 0.91, False), Hit("2024-03-04", "b", 0.88, True)))
    assert in_block(probe, 0.87, 600) == (True, True)
    assert in_block(probe, 0.90, 600) == (True, False)  # only the unrelated memory passes
    assert in_block(probe, 0.95, 600) == (False, False)
    # A block too small for the second line: the evidence is not shown.
    assert in_block(probe, 0.87, len("- [2024-03-03] a")) == (True, False)


async def test_absent_data_is_said_and_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await memorybank_main(["--data", str(tmp_path / "nothing.json")]) == 0
    assert "absent" in capsys.readouterr().out


async def test_tiny_run_through_read_memory_dense_variants_and_recall(tmp_path: Path) -> None:
    users = load_users(_write_tiny(tmp_path))
    variants = {"vector only": CHANNEL_VARIANTS["vector only"]}
    result, recall = await run_memorybank(
        users, tmp_path / "run", embedder_env("local", "", "e5"), variants=variants
    )
    assert result.leaks == []
    assert result.written == 6 and sum(result.memories) == 6 - result.merged
    assert [a.conversation for a in result.answers] == [0, 0, 1]
    assert all(a.rank is not None and a.dense is not None for a in result.answers)
    dog, _, singer = result.answers
    assert (dog.rank, dog.dense) == (1, 1) and (singer.rank, singer.dense) == (1, 1)
    assert [len(v) for v in result.variants.values()] == [3]
    assert recall is not None
    assert len(recall.related) == 3 and len(recall.foreign) == 3  # each other's questions
    assert {p.user for p in recall.chat} == {0, 1}
    related_at_0, _, _ = shares(recall, _split(), 0.0)
    assert related_at_0 == 1.0  # every answer is among the top 3 of these tiny partitions
    names = [u.name for u in users]
    report = format_report(result, names, 1, categories=CATEGORIES, unit="user")
    assert "小林" in report and "names a time" in report and "foreign results: 0" in report
    assert "vector only" in format_variants(result, names, 1)
    assert "0.87 (default)" in format_recall(recall, 2, 1, 0.87)


def _split() -> Any:
    from bench.locomo_report import Split

    return Split("all", (0, 1))
