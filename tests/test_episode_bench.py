"""The episode benchmark's data (no bot, no model): the generated multi-session set is
whole, the same on every run, and its questions' gold conversations exist."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.episode_data import IDLE, build_set, problems, split_of
from bench.episode_locomo import locomo_chats
from bench.locomo_data import load_conversations


def test_the_set_is_whole_and_large_enough() -> None:
    es = build_set()
    assert problems(es) == []
    chats = es.chats
    assert len(chats) >= 40
    langs = Counter(c.lang for c in chats)
    assert abs(langs["zh"] - langs["en"]) <= 2
    groups = [c for c in chats if c.is_group]
    assert 0.25 <= len(groups) / len(chats) <= 0.45
    assert all(3 <= len(c.members) <= 5 for c in groups)
    for chat in chats:
        assert len(chat.conversations) >= 3
        assert len({c.day for c in chat.conversations}) == len(chat.conversations)
        assert all(3 <= len(c.lines) <= 12 for c in chat.conversations)
        if chat.is_group:  # several members speak in a group's conversations
            speakers = {ln.user_id for c in chat.conversations for ln in c.lines if not ln.is_bot}
            assert len(speakers) >= 2


def test_every_question_has_its_gold_or_none() -> None:
    es = build_set()
    kinds = Counter((q.kind, q.detail) for c in es.chats for q in c.questions)
    for kind in ("yesterday", "weekday", "first", "topic"):
        assert kinds[kind, ""] >= 40
    assert kinds["last", "after"] >= 40 and kinds["last", "mid-way"] >= 40
    assert all(kinds["none", d] >= 40 for d in ("plain", "unknown_topic", "other_person"))
    for chat in es.chats:
        ids = {c.id for c in chat.conversations}
        for q in chat.questions:
            assert q.gold is None or q.gold in ids
            if q.detail == "mid-way":  # 上次 is the one before the current conversation
                assert q.current and chat.closed_before(q.before)[-1].id == q.gold
                assert q.current[-1].at < q.now < q.current[-1].at + IDLE


def test_the_set_and_its_split_are_stable() -> None:
    a, b = build_set(), build_set()
    assert a == b
    assert build_set(7) != a
    assert split_of("610001") == split_of("610001")
    splits = Counter(c.split for c in a.chats)
    assert 0.15 <= splits["held-out"] / len(a.chats) <= 0.45
    for split in ("dev", "held-out"):
        mine = [c for c in a.chats if c.split == split]
        assert {c.lang for c in mine} == {"zh", "en"} and any(c.is_group for c in mine)


def test_problems_names_a_wrong_gold() -> None:
    es = build_set()
    chat = es.chats[0]
    q = next(q for q in chat.questions if q.kind == "last" and q.detail == "after")
    first = chat.conversations[0].id
    broken = dataclasses.replace(q, gold=first)
    bad = dataclasses.replace(chat, questions=(broken,))
    assert any("not the last" in p for p in problems(dataclasses.replace(es, chats=(bad,))))
    early = dataclasses.replace(q, now=chat.conversations[0].start - timedelta(days=1))
    bad = dataclasses.replace(chat, questions=(dataclasses.replace(early, before=early.now),))
    assert any(
        "not a conversation closed" in p for p in problems(dataclasses.replace(es, chats=(bad,)))
    )


def test_locomo_sessions_become_dated_conversations(tmp_path: Path) -> None:
    obs = [
        {"text": "A adopted a cat.", "dia": ["D1:5"], "session_date": "1:56 pm on 8 May, 2023"},
        {"text": "B likes jazz.", "dia": ["D1:7"], "session_date": "1:56 pm on 8 May, 2023"},
        {"text": "A moved.", "dia": ["D2:2"], "session_date": "12:09 am on 13 September, 2023"},
    ]
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps({"conversations": [{"observations": obs, "qa": []}]}), "utf-8")
    (chat,) = locomo_chats(load_conversations(path))
    assert chat.split == "dev" and [len(c.lines) for c in chat.conversations] == [2, 1]
    assert chat.conversations[1].day.isoformat() == "2023-09-13"  # wall time, owner's zone
    texts = {q.text: q.gold for q in chat.questions}
    assert texts["What did we talk about on 8 May, 2023?"] == chat.conversations[0].id
    assert texts["2023年9月13日我们聊了什么？"] == chat.conversations[1].id
    assert all(len(chat.closed_before(q.now)) == 2 for q in chat.questions)


def test_the_bench_counts_what_the_plugin_picks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stand-ins for the plugin's functions (not a ranking: the newest closed episode for a
    question with 上次/上回/last time, nothing otherwise) check the counting and the time filter."""
    from bench import episode_bench

    def fake_recall(chat, episodes, text, now, before):  # type: ignore[no-untyped-def]
        if not any(w in text for w in ("上次", "上回", "last time")):
            return [], ""
        picked = [max((e for e in episodes if e.end < before.timestamp()), key=lambda e: e.end)]
        return picked, "<EPISODES>\nx\n</EPISODES>"

    def fake_extract(chat, conv):  # type: ignore[no-untyped-def]
        return SimpleNamespace(id=conv.id, end=conv.end.timestamp(), summary="s" * 10, topics=())

    monkeypatch.setattr(episode_bench, "recall", fake_recall)
    monkeypatch.setattr(episode_bench, "extract", fake_extract)
    chats = build_set().chats[:6]
    figs = episode_bench.measure(chats, len)
    total = episode_bench.Figures()
    for f in figs.values():
        for kind, (asked, hit) in f.by_kind.items():
            if kind.startswith("last"):
                assert asked == hit
        total.asked += f.asked
        total.all_turns += f.all_turns
    assert total.asked == sum(q.gold is not None for c in chats for q in c.questions)
    assert "gold episode picked" in episode_bench.report(figs, markdown=True)


def test_topic_bench_scores_and_evidence_sessions() -> None:
    """``bench.episode_topics``: a question counts only when its evidence is in one session;
    hit@1 / hit@3 / nothing picked are counted from the ranked ids."""
    from bench.episode_topics import Scores, _session_of

    assert _session_of(frozenset({"D3:7", "D3:9"})) == 3
    assert _session_of(frozenset({"D3:7", "D4:1"})) is None
    assert _session_of(frozenset()) is None
    s = Scores()
    s.add(["a", "b"], "a")
    s.add(["b", "c", "a"], "a")
    s.add(["b", "c", "d", "a"], "a")
    s.add([], "a")
    assert (s.asked, s.first, s.top, s.none) == (4, 1, 2, 1)
