"""The time sets (``bench/data/*.json``) as the time benchmark reads them, their integrity,
and the arithmetic of its scores.

Two files, both written by hand in Python (:mod:`bench.time_set_zh`,
:mod:`bench.time_set_evolving`) and stored as JSON so that anything can read them:

* ``time_questions_zh.json``: questions naming a period (or none) at a local "now";
* ``evolving_facts_zh.json``: facts that change (``supersedes``), "now" / "before" questions.

Shape: ``{"name", "timezone", "users": [{"user_id", "split", "memories": [{"id", "content",
"said_at", "topic", "counter", "supersedes"}], "questions": [{"id", "now", "text", "lang",
"kind", "answers", "period"}]}]}``; ``said_at`` / ``now`` are local ISO stamps with their
offset, ``period`` the first and last local day the question's words name (``null``: none).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from .time_spans import local

__all__ = ["EVOLVING_SET", "ZH_SET", "TimeSet", "load_set", "problems", "write_set"]
__all__ += ["TimeMemory", "TimeQuestion", "TimeUser", "first_rank", "link_order"]
__all__ += ["newest_first", "shown_in_top", "topic_first"]

DATA_DIR = Path(__file__).resolve().parent / "data"
ZH_SET = DATA_DIR / "time_questions_zh.json"
EVOLVING_SET = DATA_DIR / "evolving_facts_zh.json"
ZONE = "Asia/Shanghai"
"""The owner's zone of both sets (and of the dated LoCoMo replay)."""
COUNTERS = frozenset({"", "other_person", "negation", "maybe", "newer_different"})


@dataclass(frozen=True, slots=True)
class TimeMemory:
    id: str
    content: str
    said_at: datetime  # aware, the owner's zone
    topic: str
    counter: str  # counter-example mark (COUNTERS) or ""
    supersedes: str  # id of the memory this one updates, or ""


@dataclass(frozen=True, slots=True)
class TimeQuestion:
    id: str
    now: datetime
    text: str
    lang: str  # "zh" or "en"
    kind: str  # "period" / "no_period" (time set), "now" / "before" (evolving facts)
    answers: frozenset[str]
    period: tuple[date, date] | None


@dataclass(frozen=True, slots=True)
class TimeUser:
    user_id: str
    split: str  # "dev" or "held-out"
    memories: tuple[TimeMemory, ...]
    questions: tuple[TimeQuestion, ...]

    def memory(self, memory_id: str) -> TimeMemory:
        return next(m for m in self.memories if m.id == memory_id)


@dataclass(frozen=True, slots=True)
class TimeSet:
    name: str
    zone: ZoneInfo
    users: tuple[TimeUser, ...]


def _has_cjk(text: str) -> bool:
    return any("\u4e00" <= ch <= "\u9fff" for ch in text)


def _stamp(text: str) -> str:
    return local(text).isoformat()


def _json_user(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A generator's user (tuples, local times without a zone) in the file's shape."""
    uid = raw["user_id"]
    memories = []
    for mem in raw["memories"]:
        key, when, topic, content, counter = mem[:5]
        supersedes = mem[5] if len(mem) > 5 else ""
        memories.append(
            {
                "id": f"{uid}-{key}",
                "content": content,
                "said_at": _stamp(when),
                "topic": topic,
                "counter": counter,
                "supersedes": f"{uid}-{supersedes}" if supersedes else "",
            }
        )
    questions = []
    for n, q in enumerate(raw["questions"], start=1):
        if "nows" in raw:  # the time set: (now key, text, answers, span)
            now, (_, text, answers, span), kind = raw["nows"][q[0]], q, ""
            kind = "period" if span is not None else "no_period"
        else:  # evolving facts: (kind, text, answers)
            now, (kind, text, answers), span = raw["now"], q, None
        questions.append(
            {
                "id": f"{uid}-q{n}",
                "now": _stamp(now),
                "text": text,
                "lang": "zh" if _has_cjk(text) else "en",
                "kind": kind,
                "answers": [f"{uid}-{a}" for a in answers],
                # A span of this week / month / year ends today: nothing is said later.
                "period": None
                if span is None
                else [span[0].isoformat(), min(span[1], local(now).date()).isoformat()],
            }
        )
    return {"user_id": uid, "split": raw["split"], "memories": memories, "questions": questions}


def set_json(path: Path, users: Sequence[Mapping[str, Any]]) -> str:
    """The file's text for a generator's ``users`` (what :func:`write_set` writes)."""
    doc = {
        "name": path.stem,
        "source": f"written by hand in bench/{'time_set_zh' if 'questions' in path.stem else 'time_set_evolving'}.py",
        "timezone": ZONE,
        "users": [_json_user(u) for u in users],
    }
    return json.dumps(doc, ensure_ascii=False, indent=1) + "\n"


def write_set(path: Path, users: Sequence[Mapping[str, Any]]) -> None:
    path.write_text(set_json(path, users), encoding="utf-8")
    print(f"{path}: {len(users)} users")


def _day(text: str) -> date:
    return date.fromisoformat(text)


def load_set(path: Path) -> TimeSet:
    raw = json.loads(path.read_text(encoding="utf-8"))
    users = []
    for u in raw["users"]:
        memories = tuple(
            TimeMemory(
                str(m["id"]),
                str(m["content"]),
                datetime.fromisoformat(m["said_at"]),
                str(m["topic"]),
                str(m.get("counter") or ""),
                str(m.get("supersedes") or ""),
            )
            for m in u["memories"]
        )
        questions = tuple(
            TimeQuestion(
                str(q["id"]),
                datetime.fromisoformat(q["now"]),
                str(q["text"]),
                str(q["lang"]),
                str(q["kind"]),
                frozenset(map(str, q["answers"])),
                None if q.get("period") is None else (_day(q["period"][0]), _day(q["period"][1])),
            )
            for q in u["questions"]
        )
        users.append(TimeUser(str(u["user_id"]), str(u["split"]), memories, questions))
    return TimeSet(str(raw["name"]), ZoneInfo(str(raw["timezone"])), tuple(users))


def _user_problems(user: TimeUser, zone: ZoneInfo) -> list[str]:
    out: list[str] = []
    by_id = {m.id: m for m in user.memories}
    if len(by_id) != len(user.memories):
        out.append(f"{user.user_id}: repeated memory ids")
    first_now = min((q.now for q in user.questions), default=None)
    for m in user.memories:
        if m.said_at.utcoffset() != m.said_at.astimezone(zone).utcoffset():
            out.append(f"{m.id}: said_at not in the set's zone")
        if first_now is not None and m.said_at >= first_now:
            out.append(f"{m.id}: said after a question is asked")
        if m.counter not in COUNTERS:
            out.append(f"{m.id}: unknown counter mark {m.counter!r}")
        old = by_id.get(m.supersedes) if m.supersedes else None
        if m.supersedes and (old is None or old.said_at >= m.said_at or old.topic != m.topic):
            out.append(f"{m.id}: supersedes {m.supersedes!r}, not an older memory of its topic")
    superseded = {m.supersedes for m in user.memories if m.supersedes}
    for q in user.questions:
        if not q.answers or not q.answers <= by_id.keys():
            out.append(f"{q.id}: answers {sorted(q.answers)} not among the user's memories")
            continue
        if q.lang != ("zh" if _has_cjk(q.text) else "en"):
            out.append(f"{q.id}: lang {q.lang!r} does not fit its text")
        topics = {by_id[a].topic for a in q.answers}
        if q.kind == "period":
            if q.period is None or q.period[1] > q.now.astimezone(zone).date():
                out.append(f"{q.id}: a period question needs a span not after its now")
                continue
            first, last = q.period
            days = {a: by_id[a].said_at.astimezone(zone).date() for a in q.answers}
            out += [
                f"{q.id}: answer {a} said {d}, outside {first}…{last}"
                for a, d in days.items()
                if not first <= d <= last
            ]
            others = [m for m in user.memories if m.topic in topics and m.id not in q.answers]
            if not any(not first <= m.said_at.astimezone(zone).date() <= last for m in others):
                out.append(
                    f"{q.id}: no memory of its topic outside its period (time decides nothing)"
                )
        elif q.kind == "no_period":
            if q.period is not None:
                out.append(f"{q.id}: a question without a period has a span")
        elif q.kind == "now":
            if not all(by_id[a].supersedes for a in q.answers):
                out.append(f"{q.id}: a now-question's answer must supersede an older version")
        elif q.kind == "before":
            if not q.answers <= superseded:
                out.append(f"{q.id}: a before-question's answer must be superseded")
        else:
            out.append(f"{q.id}: unknown kind {q.kind!r}")
    return out


def problems(ts: TimeSet) -> list[str]:
    """What is wrong with the set (empty: nothing): ids, stamps, answers, spans, links."""
    out: list[str] = []
    seen: set[str] = set()
    for user in ts.users:
        if user.user_id in seen:
            out.append(f"{user.user_id}: repeated user")
        seen.add(user.user_id)
        if user.split not in ("dev", "held-out"):
            out.append(f"{user.user_id}: unknown split {user.split!r}")
        out += _user_problems(user, ts.zone)
    return out


# -- scores -------------------------------------------------------------------------------


def first_rank(ids: Sequence[str], answers: frozenset[str]) -> int | None:
    """1-based rank of the first answer among ``ids`` (``None``: absent)."""
    return next((pos for pos, i in enumerate(ids, start=1) if i in answers), None)


def topic_first(ids: Sequence[str], answers: frozenset[str], topic_of: Mapping[str, str]) -> bool:
    """Whether an answer comes before every other memory of the answers' topic."""
    topics = {topic_of[a] for a in answers}
    first = next((i for i in ids if topic_of.get(i) in topics), None)
    return first is not None and first in answers


def shown_in_top(
    ids: Sequence[str],
    answers: frozenset[str],
    shown: Mapping[str, str],
    said: Mapping[str, str],
    k: int = 5,
) -> bool:
    """Whether an answer is in the first ``k`` with the date shown beside it equal to the local
    day it was said (``shown``: the date a reader sees per id; ``said``: the true local day)."""
    return any(i in answers and shown.get(i) == said.get(i) for i in ids[:k])


def _older_versions(memory_id: str, supersedes: Mapping[str, str]) -> set[str]:
    out: set[str] = set()
    while (memory_id := supersedes.get(memory_id, "")) and memory_id not in out:
        out.add(memory_id)
    return out


def newest_first(
    ids: Sequence[str], answers: frozenset[str], supersedes: Mapping[str, str]
) -> bool:
    """Whether the newest version (an answer) comes before every older version it replaced."""
    rank = first_rank(ids, answers)
    if rank is None:
        return False
    older = set().union(*(_older_versions(a, supersedes) for a in answers))
    return not any(i in older for i in ids[: rank - 1])


def link_order(ids: Sequence[str], supersedes: Mapping[str, str]) -> list[str]:
    """``ids`` with every superseded memory moved right after the one that replaced it (when
    both are listed): what a ``supersedes`` link can do at most for a "now" question."""
    out = list(ids)
    for newer, older in supersedes.items():
        if newer in out and older in out and out.index(older) < out.index(newer):
            out.remove(older)
            out.insert(out.index(newer) + 1, older)
    return out
