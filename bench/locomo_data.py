"""LoCoMo observations and questions as the LoCoMo benchmark reads them.

The file (``locomo_observations.json``, kept outside the repository: CC BY-NC
4.0, evaluation only) holds conversations, each with ``observations`` (a fact
the dataset's authors extracted from a session: ``text``, the dialogue turns
``dia`` it comes from, ``session_date``, ``speaker``) and ``qa`` (``question``,
``answer``, ``evidence`` turns, ``category``). Nothing of it is ever written
into the repository: the benchmark prints figures only.

A question counts when it is of categories 1–4 and at least one of its
evidence turns has an observation (otherwise no memory could answer it).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

__all__ = [
    "CATEGORIES",
    "Conversation",
    "Observation",
    "Question",
    "load_conversations",
    "parse_session_date",
    "parse_turns",
]

CATEGORIES: dict[int, str] = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
"""LoCoMo's question categories in the dataset's own numbering (5, adversarial, is left out)."""

NOW_AFTER_LAST_SESSION = timedelta(days=1)
"""The questions are asked this long after a conversation's last session."""

_TURN = re.compile(r"D:?(\d+):(\d+)")
_SESSION_DATE = "%I:%M %p on %d %B, %Y"


@dataclass(frozen=True, slots=True)
class Observation:
    text: str
    turns: frozenset[str]  # dialogue turns it was extracted from ("D1:3")
    when: datetime  # the session's date (UTC)


@dataclass(frozen=True, slots=True)
class Question:
    text: str
    category: int
    evidence: frozenset[str]


@dataclass(frozen=True, slots=True)
class Conversation:
    """One conversation: its observations oldest first and its answerable questions."""

    name: str
    observations: tuple[Observation, ...]
    questions: tuple[Question, ...]
    skipped: int  # questions of categories 1–4 whose evidence has no observation

    @property
    def now(self) -> datetime:
        """When the questions are asked: a day after the last session."""
        return max(o.when for o in self.observations) + NOW_AFTER_LAST_SESSION


def parse_turns(values: Any) -> frozenset[str]:
    """Dialogue turn ids of an ``evidence`` / ``dia`` list, normalised (``D:11:26`` -> ``D11:26``;
    one string may hold several: ``"D8:6; D9:17"``)."""
    if isinstance(values, str):
        values = [values]
    turns: set[str] = set()
    for value in values or ():
        turns.update(f"D{s}:{t}" for s, t in _TURN.findall(str(value)))
    return frozenset(turns)


def parse_session_date(value: str) -> datetime:
    """``"1:56 pm on 8 May, 2023"`` as an aware datetime (UTC)."""
    return datetime.strptime(value.strip(), _SESSION_DATE).replace(tzinfo=UTC)


def _conversation(raw: dict[str, Any], index: int) -> Conversation:
    observations = [
        Observation(
            str(o["text"]), parse_turns(o.get("dia")), parse_session_date(o["session_date"])
        )
        for o in raw.get("observations", ())
    ]
    observations.sort(key=lambda o: o.when)  # stable: a session's facts keep their order
    observed = frozenset().union(*(o.turns for o in observations))
    questions: list[Question] = []
    skipped = 0
    for qa in raw.get("qa", ()):
        category = int(qa.get("category", 0))
        if category not in CATEGORIES:
            continue
        evidence = parse_turns(qa.get("evidence"))
        if not evidence & observed:
            skipped += 1
            continue
        questions.append(Question(str(qa["question"]), category, evidence))
    name = str(raw.get("sample_id") or f"conversation {index + 1}")
    return Conversation(name, tuple(observations), tuple(questions), skipped)


def load_conversations(path: Path) -> list[Conversation]:
    """Every conversation of the file, in the file's order (empty ones left out)."""
    raw = json.loads(path.read_text(encoding="utf-8"))
    convs = [_conversation(c, i) for i, c in enumerate(raw.get("conversations", ()))]
    return [c for c in convs if c.observations]
