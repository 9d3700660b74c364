"""The time benchmark's data files and arithmetic (no bot, no model): the sets are whole,
their spans say what their words mean, and the scores count what they claim to."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from bench import time_set_evolving, time_set_zh
from bench.locomo_data import load_conversations
from bench.time_bench import ASKED_AFTER, locomo_units, set_units
from bench.time_data import (
    EVOLVING_SET,
    ZH_SET,
    TimeSet,
    first_rank,
    link_order,
    load_set,
    newest_first,
    problems,
    set_json,
    shown_in_top,
    topic_first,
)
from bench.time_report import at_k
from bench.time_run import DENSE, Asked, _block_dates
from bench.time_spans import local, month, named_month, recent, week, weekday, weekend, year

SH = ZoneInfo("Asia/Shanghai")


@pytest.mark.parametrize(
    ("path", "users"), [(ZH_SET, time_set_zh.USERS), (EVOLVING_SET, time_set_evolving.USERS)]
)
def test_the_files_are_what_their_generators_write(path: Path, users: list) -> None:
    assert path.read_text(encoding="utf-8") == set_json(path, users)


def test_the_time_set_is_whole() -> None:
    ts = load_set(ZH_SET)
    assert problems(ts) == []
    questions = [q for u in ts.users for q in u.questions]
    assert len(ts.users) >= 10 and len(questions) >= 80
    held = [u for u in ts.users if u.split == "held-out"]
    assert len(held) / len(ts.users) >= 0.3
    kinds = Counter(q.kind for q in questions)
    assert kinds["period"] >= 60 and kinds["no_period"] >= 8
    assert sum(q.lang == "en" for q in questions) >= 8
    assert sum(q.now.astimezone(ts.zone).hour < 8 for q in questions) >= 10  # 00:00–08:00
    counters = Counter(m.counter for u in ts.users for m in u.memories)
    assert all(counters[c] >= 2 for c in ("other_person", "negation", "maybe", "newer_different"))
    for user in ts.users:  # memories over months, several on one topic on different days
        days = {m.said_at.date() for m in user.memories}
        assert max(days) - min(days) >= timedelta(days=75)
        topics = Counter(m.topic for m in user.memories)
        assert topics.most_common(1)[0][1] >= 4


def test_the_evolving_set_is_whole() -> None:
    ts = load_set(EVOLVING_SET)
    assert problems(ts) == []
    kinds = Counter(q.kind for u in ts.users for q in u.questions)
    assert kinds["now"] >= 20 and kinds["before"] >= 10
    assert sum(u.split == "held-out" for u in ts.users) / len(ts.users) >= 0.3
    links = [m for u in ts.users for m in u.memories if m.supersedes]
    assert len(links) >= 14
    counters = Counter(m.counter for u in ts.users for m in u.memories)
    assert counters["newer_different"] >= 5 and counters["other_person"] >= 5


def _broken(ts: TimeSet, **changes: object) -> list[str]:
    user = ts.users[0]
    q = dataclasses.replace(user.questions[0], **changes)  # type: ignore[arg-type]
    return problems(dataclasses.replace(ts, users=(dataclasses.replace(user, questions=(q,)),)))


def test_problems_names_a_wrong_span_a_late_memory_and_a_missing_answer() -> None:
    ts = load_set(ZH_SET)
    q = ts.users[0].questions[0]  # 昨天我说订了去哪的机票？ asked 2025-11-19 07:20
    assert q.period == (date(2025, 11, 18), date(2025, 11, 18))
    wrong = _broken(ts, period=(date(2025, 11, 17), date(2025, 11, 17)))
    assert any("outside" in p for p in wrong)
    early = _broken(ts, now=datetime(2025, 11, 18, 7, 0, tzinfo=SH), period=None, kind="no_period")
    assert any("said after a question is asked" in p for p in early)
    assert any("not among" in p for p in _broken(ts, answers=frozenset({"nobody"})))
    assert any("lang" in p for p in _broken(ts, lang="en"))


def test_spans_weeks_from_monday_months_and_years_without_a_future() -> None:
    now = "2026-01-04 06:30"  # a Sunday, early morning
    assert local(now) == datetime(2026, 1, 3, 22, 30, tzinfo=UTC)
    assert week(now, 0) == (date(2025, 12, 29), date(2026, 1, 4))
    assert week(now, -1) == (date(2025, 12, 22), date(2025, 12, 28))
    assert weekday(now, -1, 2) == (date(2025, 12, 24),) * 2
    assert weekend(now, -1) == (date(2025, 12, 27), date(2025, 12, 28))
    assert month(now, -1) == (date(2025, 12, 1), date(2025, 12, 31))
    assert month("2024-03-10 12:00", -1) == (date(2024, 2, 1), date(2024, 2, 29))
    assert named_month(now, 1) == (date(2026, 1, 1), date(2026, 1, 31))
    assert named_month(now, 10) == (date(2025, 10, 1), date(2025, 10, 31))
    assert year(now, -1) == (date(2025, 1, 1), date(2025, 12, 31))
    assert recent(now, 3) == (date(2026, 1, 1), date(2026, 1, 4))


def test_scores_count_what_they_claim() -> None:
    ids = ["x", "a", "b", "old", "new"]
    assert first_rank(ids, frozenset({"b", "new"})) == 3
    assert first_rank(ids, frozenset({"z"})) is None
    topics = {"x": "pets", "a": "trip", "b": "trip", "old": "home", "new": "home"}
    assert topic_first(ids, frozenset({"a"}), topics)  # "x" is another topic
    assert not topic_first(ids, frozenset({"b"}), topics)  # "a" of the same topic first
    said = {"a": "2025-11-18", "b": "2025-11-19"}
    assert shown_in_top(ids, frozenset({"a"}), {"a": "2025-11-18"}, said)
    assert not shown_in_top(ids, frozenset({"a"}), {"a": "2025-11-17"}, said)  # a UTC day
    assert not shown_in_top(ids, frozenset({"b"}), {"b": "2025-11-19"}, said, k=2)
    links = {"new": "old", "b": "a"}
    assert not newest_first(ids, frozenset({"new"}), links)
    assert newest_first(["new", "old"], frozenset({"new"}), links)
    assert newest_first(["new"], frozenset({"new"}), links)
    assert not newest_first(["old"], frozenset({"new"}), links)
    assert link_order(ids, links) == ["x", "b", "a", "new", "old"]
    asked = [
        Asked(0, "dev", "g", "zh", False, ranks={DENSE: 1}),
        Asked(0, "dev", "g", "zh", False, ranks={DENSE: 4}),
        Asked(0, "dev", "g", "zh", False, ranks={DENSE: None}),
        Asked(0, "dev", "g", "zh", False, ranks={}),  # not asked by that ranking
    ]
    assert at_k(asked, DENSE, 1) == pytest.approx(1 / 3)
    assert at_k(asked, DENSE, 5) == pytest.approx(2 / 3)
    assert at_k(asked, "other", 5) is None


def test_the_block_dates_are_read_from_its_lines() -> None:
    block = "<MEMORIES>\n说明\n- [2025-11-17] 早上去看了新房\n- [2025-11-18 周二] 卫生间漏水…\n</MEMORIES>"
    content = {"1": "早上去看了新房", "2": "卫生间漏水，工人说要重新做防水。", "3": "别的"}
    assert _block_dates(block, ["1", "2", "3"], content) == {"1": "2025-11-17", "2": "2025-11-18"}


def test_locomo_sessions_are_wall_time_in_the_owners_zone(tmp_path: Path) -> None:
    obs = [
        {
            "text": "A moved to Lisbon.",
            "dia": ["D1:2"],
            "session_date": "12:09 am on 13 September, 2023",
        },
        {"text": "A adopted a cat.", "dia": ["D2:5"], "session_date": "1:56 pm on 8 May, 2023"},
    ]
    qa = [{"question": "When did A move?", "answer": "-", "evidence": ["D1:2"], "category": 2}]
    path = tmp_path / "tiny.json"
    path.write_text(
        json.dumps({"conversations": [{"observations": obs, "qa": qa}]}), encoding="utf-8"
    )
    (unit,) = locomo_units(load_conversations(path), 0, SH)
    assert unit.split == "held-out"
    moved = unit.rows[unit.keys.index("o1")]
    assert moved["created_at"] == "2023-09-13T00:09:00+08:00"  # 2023-09-12 in UTC
    assert unit.said_day["o1"] == "2023-09-13"
    (q,) = unit.questions
    assert q.answers == frozenset({"o1"}) and q.group == "2 temporal"
    assert q.now == datetime(2023, 9, 13, 0, 9, tzinfo=SH) + ASKED_AFTER


def test_set_units_mark_counter_examples_in_the_period() -> None:
    units = set_units(load_set(ZH_SET))
    first = units[0]
    by_text = {q.text: q for q in first.questions}
    assert by_text["上周末我说更想去哪里玩？"].counter  # 小刘 on the same weekend
    assert not by_text["昨天我说订了去哪的机票？"].counter
    evolving = set_units(load_set(EVOLVING_SET))
    assert evolving[0].supersedes["520001-a2"] == "520001-a1"
    assert all(q.newest == (q.group == "now") for u in evolving for q in u.questions)
