"""LoCoMo's sessions as past conversations, for the episode benchmark's public-data check.

Each LoCoMo conversation (``../shared/data/locomo``, CC BY-NC 4.0, read and never copied)
becomes one private chat; each of its sessions one conversation whose lines are the
session's observations (the dataset keeps no raw dialogue here), at the session's wall
time in the owner's zone. The questions name a session's date ("What did we talk about
on 8 May, 2023?", 「2023年5月8日我们聊了什么？」) and are asked a day after the last session;
a date with two sessions is not asked. Conversations 1–3 are dev, the rest held out (as
the time benchmark splits LoCoMo).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta

from .episode_data import ZONE, Chat, Conversation, Line, Member, Question
from .locomo_data import Conversation as LocomoConversation

__all__ = ["LOCOMO_DEV", "locomo_chats"]

LOCOMO_DEV = 3
LOCOMO_UID = 640_000


def _session(turns: frozenset[str]) -> int:
    return min(int(t[1:].split(":")[0]) for t in turns) if turns else 0


def _asked(when_en: str, when_zh: str) -> tuple[str, str]:
    return f"What did we talk about on {when_en}?", f"{when_zh}我们聊了什么？"


def locomo_chats(convs: list[LocomoConversation], dev: int = LOCOMO_DEV) -> list[Chat]:
    chats = []
    for index, conv in enumerate(convs):
        uid = str(LOCOMO_UID + index)
        by_session: dict[int, list[Line]] = defaultdict(list)
        for o in conv.observations:
            lines = by_session[_session(o.turns)]
            at = o.when.replace(tzinfo=ZONE) + timedelta(seconds=30 * len(lines))
            lines.append(Line(uid, "", o.text, at))
        sessions = [
            Conversation(f"{uid}-s{n}", f"session {n}", tuple(lines))
            for n, lines in sorted(by_session.items(), key=lambda kv: kv[1][0].at)
        ]
        now = max(s.end for s in sessions).replace(hour=20, minute=0, second=0) + timedelta(days=1)
        per_day: dict[object, list[Conversation]] = defaultdict(list)
        for s in sessions:
            per_day[s.day].append(s)
        questions = []
        for s in sessions:
            if len(per_day[s.day]) > 1:
                continue
            d = s.day
            en, zh = _asked(f"{d.day} {d:%B}, {d.year}", f"{d.year}年{d.month}月{d.day}日")
            for lang, text in (("en", en), ("zh", zh)):
                qid = f"{uid}-q{len(questions) + 1}"
                questions.append(Question(qid, text, "date", lang, uid, now, now, s.id))
        split = "dev" if index < dev else "held-out"
        chats.append(
            Chat(uid, "en", False, split, (Member(uid, ""),), tuple(sessions), tuple(questions))
        )
    return chats
