"""MemoryBank-CN users and probing questions as the MemoryBank-CN benchmark reads them.

The file (``memorybank_cn.json``, kept outside the repository beside it in
``../shared/data/memorybank_cn/``; MemoryBank, Zhong et al. 2023, MIT) holds
``users``, each with ``turns`` (the user's own messages: ``id`` ``D<day>:<n>``,
``date`` ``YYYY-MM-DD``, ``text``) and ``qa`` (``question``, the ``evidence``
turns that state the answer, ``answer``). Nothing of it is written into the
repository: the benchmark prints figures only.

Each user becomes a :class:`~bench.locomo_data.Conversation` (so the LoCoMo
benchmark's write / ask / report code runs on it unchanged): one memory per
turn, written at noon of its date plus one minute per position in the day (the
day's order kept); questions asked a day after the last turn. A question counts
when its ``evidence`` is not empty (the others are answered only in the AI's
replies, which are not memories). Its category says whether the question
names a time (:data:`NAMES_A_TIME`: "在5月2号", "我们第一次对话的时候"):
those can use the memories' dates, plain cosine cannot.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from .locomo_data import Conversation, Observation, Question

__all__ = ["CATEGORIES", "NAMES_A_TIME", "load_users", "names_a_time"]

NAMES_A_TIME = 1
NO_TIME = 2
CATEGORIES: dict[int, str] = {NAMES_A_TIME: "names a time", NO_TIME: "no time"}

_TIME = re.compile(r"\d{1,2}\s*月\s*\d{1,2}\s*[日号]|第一次|那天|那一天|上周|昨天|前天")
"""The benchmark's own reading of "this question names a time" (a category of the report,
written for these questions, independent of any ranking code)."""

_NOON = timedelta(hours=12)


def names_a_time(question: str) -> bool:
    return _TIME.search(question) is not None


def _when(date: str, position: int) -> datetime:
    day = datetime.strptime(date, "%Y-%m-%d").replace(tzinfo=UTC)
    return day + _NOON + timedelta(minutes=position)


def _position(turn_id: str) -> int:
    try:
        return int(turn_id.split(":")[1])
    except (IndexError, ValueError):
        return 0


def _user(raw: dict[str, Any], index: int) -> Conversation:
    observations = [
        Observation(str(t["text"]), frozenset({str(t["id"])}), _when(t["date"], _position(t["id"])))
        for t in raw.get("turns", ())
    ]
    observations.sort(key=lambda o: o.when)
    known = frozenset().union(*(o.turns for o in observations))
    questions: list[Question] = []
    skipped = 0
    for qa in raw.get("qa", ()):
        evidence = frozenset(str(e) for e in qa.get("evidence") or ()) & known
        if not evidence:
            skipped += 1
            continue
        text = str(qa["question"])
        category = NAMES_A_TIME if names_a_time(text) else NO_TIME
        questions.append(Question(text, category, evidence))
    name = str(raw.get("user") or f"user {index + 1}")
    return Conversation(name, tuple(observations), tuple(questions), skipped)


def load_users(path: Path) -> list[Conversation]:
    """Every user of the file with at least one turn, in the file's order."""
    raw = json.loads(path.read_text(encoding="utf-8"))
    users = [_user(u, i) for i, u in enumerate(raw.get("users", ()))]
    return [u for u in users if u.observations]
