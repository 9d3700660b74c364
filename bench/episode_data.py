"""The multi-session episode set (issue #48 item 6): chats, their past conversations, and
questions about what was discussed when, each with its gold conversation (or none).

Generated in code from a seed (:data:`SEED`), never stored and never copied from public
data: the words are the hand-written topics of :mod:`bench.episode_set_zh` and
:mod:`bench.episode_set_en`; the seed picks, per chat, which topics, who speaks, how many
lines (3–12), on which local days (Asia/Shanghai) and at what times. Half the chats are
Chinese, half English; about a third are groups of 3–5 members.

Questions (``kind``):

* ``last``: 「上次我们聊了什么」 / "what did we talk about last time" — asked a while after
  the newest conversation, or mid-way through a later one (``current`` holds its lines so
  far): then 上次 is the conversation before the current one;
* ``yesterday``, ``weekday`` (上周三 / "last Wednesday"), ``first`` (our first chat),
  ``topic`` (「上回说的面试怎么样了」 / "how did the job interview go");
* ``none``: must get no episode — a fact or chit-chat question (``plain``), a topic never
  discussed (``unknown_topic``), a person never in the chat (``other_person``).

Chats are split 70/30 into dev and held-out by a stable hash of the chat id
(:func:`split_of`); the benchmark reports the two separately.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

from . import episode_set_en, episode_set_zh
from .episode_set_en import Topic, Wordings

__all__ = ["SEED", "ZONE", "Chat", "Conversation", "EpisodeSet", "Line", "Member", "Question"]
__all__ += ["build_set", "problems", "split_of"]

SEED = 48
ZONE = ZoneInfo("Asia/Shanghai")
BOT_ID = "10000"
IDLE = timedelta(minutes=30)
"""The default ``[episodes] idle_minutes``: a conversation is closed this long after its last line."""
CHATS_PER_LANG = 22
GROUPS_PER_LANG = 8
NAMES = {
    "zh": ("小林", "阿杰", "雨桐", "老周", "可可", "大鹏", "思琪", "浩然"),
    "en": ("Maya", "Tom", "Priya", "Leo", "Sam", "Nina", "Omar", "Jess"),
}
KINDS = ("last", "yesterday", "weekday", "first", "topic", "none")


@dataclass(frozen=True, slots=True)
class Member:
    user_id: str
    name: str


@dataclass(frozen=True, slots=True)
class Line:
    user_id: str
    name: str
    text: str
    at: datetime  # aware, the owner's zone
    is_bot: bool = False


@dataclass(frozen=True, slots=True)
class Conversation:
    id: str
    topic: str  # Topic.key
    lines: tuple[Line, ...]

    @property
    def start(self) -> datetime:
        return self.lines[0].at

    @property
    def end(self) -> datetime:
        return self.lines[-1].at

    @property
    def day(self) -> date:
        return self.start.date()


@dataclass(frozen=True, slots=True)
class Question:
    id: str
    text: str
    kind: str  # KINDS
    detail: str  # "after" / "mid-way" (last), "plain" / "unknown_topic" / "other_person" (none)
    asker: str  # user id
    now: datetime
    before: datetime
    """Where the current conversation starts (``now`` when the question opens one)."""
    gold: str | None  # the conversation id, or None: no episode must be given
    current: tuple[Line, ...] = ()


@dataclass(frozen=True, slots=True)
class Chat:
    id: str  # the user's QQ number, or the group's number
    lang: str  # "zh" / "en"
    is_group: bool
    split: str  # "dev" / "held-out"
    members: tuple[Member, ...]
    conversations: tuple[Conversation, ...]  # oldest first
    questions: tuple[Question, ...]

    def closed_before(self, moment: datetime) -> tuple[Conversation, ...]:
        """The conversations already kept as episodes at ``moment`` (idle gap passed)."""
        return tuple(c for c in self.conversations if c.end + IDLE <= moment)


@dataclass(frozen=True, slots=True)
class EpisodeSet:
    seed: int
    chats: tuple[Chat, ...]


def split_of(chat_id: str) -> str:
    """dev for about 70% of chat ids, held-out for the rest; the same on every run."""
    return "dev" if int(hashlib.sha256(chat_id.encode()).hexdigest(), 16) % 100 < 70 else "held-out"


def _pick(rng: random.Random, options: tuple[str, ...]) -> str:
    return options[rng.randrange(len(options))]


def _conversation(
    rng: random.Random, cid: str, topic: Topic, members: tuple[Member, ...], start: datetime
) -> Conversation:
    script = [(r, t) for r, t in topic.lines if len(members) > 1 or r != "o"]
    count = rng.randint(min(len(script), 4), min(len(script), 12))
    main = members[rng.randrange(len(members))]
    others = [m for m in members if m != main] or [main]
    lines: list[Line] = []
    at = start
    for n, (role, text) in enumerate(script[:count]):
        if n:
            at += timedelta(seconds=rng.randint(20, 300))
        if role == "bot":
            lines.append(Line(BOT_ID, "", text, at, is_bot=True))
        else:
            who = main if role == "a" else others[n % len(others)]
            lines.append(Line(who.user_id, who.name, text, at))
    return Conversation(cid, topic.key, tuple(lines))


def _schedule(rng: random.Random, count: int, first: date) -> list[datetime]:
    """Start times on distinct local days, 2–9 days apart, 08:00–22:30 (never past midnight)."""
    day, out = first, []
    for _ in range(count):
        minute = rng.randrange(8 * 60, 22 * 60 + 30)
        out.append(datetime(day.year, day.month, day.day, minute // 60, minute % 60, tzinfo=ZONE))
        day += timedelta(days=rng.randint(2, 9))
    return out


def _at(day: date, rng: random.Random) -> datetime:
    minute = rng.randrange(8 * 60, 23 * 60)
    return datetime(day.year, day.month, day.day, minute // 60, minute % 60, tzinfo=ZONE)


class _Asker:
    """Writes one chat's questions (ids in order, templates by chat kind)."""

    def __init__(self, rng: random.Random, chat_id: str, words: Wordings, is_group: bool) -> None:
        self.rng, self.chat_id, self.words, self.is_group = rng, chat_id, words, is_group
        self.out: list[Question] = []

    def words_of(self, kind: str) -> tuple[str, ...]:
        return getattr(self.words, f"{kind}_{'group' if self.is_group else 'private'}")

    def add(
        self,
        text: str,
        kind: str,
        detail: str,
        asker: Member,
        now: datetime,
        gold: str | None,
        *,
        before: datetime | None = None,
        current: tuple[Line, ...] = (),
    ) -> None:
        qid = f"{self.chat_id}-q{len(self.out) + 1}"
        self.out.append(
            Question(qid, text, kind, detail, asker.user_id, now, before or now, gold, current)
        )


def _questions(
    rng: random.Random, chat_id: str, lang: str, is_group: bool, members: tuple[Member, ...],
    convs: list[Conversation], topics: dict[str, Topic], unused: list[Topic],
) -> list[Question]:  # fmt: skip
    words = episode_set_zh.WORDINGS if lang == "zh" else episode_set_en.WORDINGS
    ask = _Asker(rng, chat_id, words, is_group)
    who = lambda: members[rng.randrange(len(members))]  # noqa: E731
    last = convs[-1]
    after = last.end + timedelta(minutes=rng.randint(45, 3 * 24 * 60))
    ask.add(_pick(rng, ask.words_of("last")), "last", "after", who(), after, last.id)
    # Mid-way through a later conversation: 上次 is the one before it.
    k = rng.randrange(1, len(convs))
    cur = convs[k]
    j = rng.randint(1, len(cur.lines) - 1)
    now = cur.lines[j - 1].at + timedelta(seconds=30)
    ask.add(_pick(rng, ask.words_of("last")), "last", "mid-way", who(), now, convs[k - 1].id,
            before=cur.start, current=cur.lines[:j])  # fmt: skip
    for i in rng.sample(range(len(convs)), len(convs)):  # yesterday: the day after conversation i
        nxt = convs[i + 1].start if i + 1 < len(convs) else None
        moment = _at(convs[i].day + timedelta(days=1), rng)
        if nxt is None or moment < nxt:
            ask.add(
                _pick(rng, ask.words_of("yesterday")), "yesterday", "", who(), moment, convs[i].id
            )
            break
    for i in rng.sample(range(len(convs)), len(convs)):  # weekday: some day of the next week
        c, nxt = convs[i], (convs[i + 1].start if i + 1 < len(convs) else None)
        monday = c.day - timedelta(days=c.day.weekday()) + timedelta(days=7)
        # In English "last Wednesday" said on a Friday may mean two days ago: ask no later
        # in the week than the weekday named.
        span = 7 if lang == "zh" else c.day.weekday() + 1
        days = [monday + timedelta(days=d) for d in range(span)]
        moments = [m for m in (_at(d, rng) for d in days) if nxt is None or m < nxt]
        if moments:
            wd = words.weekdays[c.day.weekday()]
            text = _pick(rng, ask.words_of("weekday")).format(wd=wd)
            ask.add(text, "weekday", "", who(), moments[rng.randrange(len(moments))], c.id)
            break
    later = after + timedelta(hours=rng.randint(1, 48))
    ask.add(_pick(rng, ask.words_of("first")), "first", "", who(), later, convs[0].id)
    c = convs[rng.randrange(len(convs) - 1)]  # a topic question never about the newest one
    text = _pick(rng, ask.words_of("topic")).format(topic=topics[c.topic].noun)
    ask.add(text, "topic", "", who(), later + timedelta(minutes=5), c.id)
    ask.add(_pick(rng, words.plain), "none", "plain", who(), after, None)
    never = unused[rng.randrange(len(unused))].noun
    text = _pick(rng, ask.words_of("topic")).format(topic=never)
    ask.add(text, "none", "unknown_topic", who(), later, None)
    text = _pick(rng, words.other_person).format(
        name=_pick(rng, words.strangers), topic=unused[rng.randrange(len(unused))].noun
    )
    ask.add(text, "none", "other_person", who(), later + timedelta(minutes=9), None)
    return ask.out


def _chat(rng: random.Random, lang: str, index: int, is_group: bool) -> Chat:
    base = 730_000 if is_group else 610_000
    chat_id = str(base + (0 if lang == "zh" else 500) + index)
    pool = episode_set_zh.TOPICS if lang == "zh" else episode_set_en.TOPICS
    if is_group:
        names = rng.sample(NAMES[lang], rng.randint(3, 5))
        members = tuple(
            Member(str(620_000 + (0 if lang == "zh" else 500) + index * 10 + n), name)
            for n, name in enumerate(names)
        )
    else:
        members = (Member(chat_id, ""),)
    chosen = rng.sample(pool, rng.randint(3, 5))
    first = date(2025, 9, 1) + timedelta(days=rng.randrange(60))
    starts = _schedule(rng, len(chosen), first)
    convs = [
        _conversation(rng, f"{chat_id}-c{n + 1}", topic, members, start)
        for n, (topic, start) in enumerate(zip(chosen, starts, strict=True))
    ]
    unused = [t for t in pool if t not in chosen]
    questions = _questions(
        rng, chat_id, lang, is_group, members, convs, {t.key: t for t in pool}, unused
    )
    return Chat(chat_id, lang, is_group, split_of(chat_id), members, tuple(convs), tuple(questions))


def build_set(seed: int = SEED) -> EpisodeSet:
    """The whole set; the same ``seed`` gives the same set on every run and machine."""
    rng = random.Random(seed)
    chats = [
        _chat(rng, lang, index, index < GROUPS_PER_LANG)
        for lang in ("zh", "en")
        for index in range(CHATS_PER_LANG)
    ]
    return EpisodeSet(seed, tuple(chats))


def _question_problems(chat: Chat, q: Question) -> list[str]:
    out: list[str] = []
    by_id = {c.id: c for c in chat.conversations}
    if q.kind not in KINDS:
        out.append(f"{q.id}: unknown kind {q.kind!r}")
    if (q.gold is None) != (q.kind == "none"):
        out.append(f"{q.id}: a {q.kind} question with gold {q.gold!r}")
    if q.asker not in {m.user_id for m in chat.members}:
        out.append(f"{q.id}: asked by a non-member")
    if q.before > q.now or (q.current and q.before != q.current[0].at):
        out.append(f"{q.id}: its current conversation does not start at 'before'")
    if q.gold is None:
        return out
    gold = by_id.get(q.gold)
    closed = chat.closed_before(q.before)
    if gold is None or gold not in closed:
        return [*out, f"{q.id}: gold {q.gold!r} is not a conversation closed when asked"]
    today = q.now.date()
    if q.kind == "last" and closed[-1] != gold:
        out.append(f"{q.id}: gold is not the last conversation before the current one")
    if q.kind == "first" and chat.conversations[0] != gold:
        out.append(f"{q.id}: gold is not the first conversation")
    if q.kind == "yesterday" and gold.day != today - timedelta(days=1):
        out.append(f"{q.id}: gold is not of yesterday")
    if q.kind == "weekday":
        monday = today - timedelta(days=today.weekday())
        if not monday - timedelta(days=7) <= gold.day < monday:
            out.append(f"{q.id}: gold is not of last week")
    return out


def problems(es: EpisodeSet) -> list[str]:
    """What is wrong with the set (empty: nothing)."""
    out: list[str] = []
    if len({c.id for c in es.chats}) != len(es.chats):
        out.append("repeated chat ids")
    for chat in es.chats:
        days = [c.day for c in chat.conversations]
        if len(set(days)) != len(days) or days != sorted(days):
            out.append(f"{chat.id}: conversations not on distinct days, oldest first")
        if len({c.topic for c in chat.conversations}) != len(chat.conversations):
            out.append(f"{chat.id}: a topic repeated")
        for c in chat.conversations:
            if not 3 <= len(c.lines) <= 12:
                out.append(f"{c.id}: {len(c.lines)} lines")
            gaps = [b.at - a.at for a, b in itertools.pairwise(c.lines)]
            if c.end.date() != c.day or any(g >= IDLE for g in gaps):
                out.append(f"{c.id}: crosses midnight or an idle gap")
            if any(g < timedelta(0) for g in gaps):
                out.append(f"{c.id}: lines out of order")
        if chat.split != split_of(chat.id):
            out.append(f"{chat.id}: split {chat.split!r} is not its hash's")
        for q in chat.questions:
            out += _question_problems(chat, q)
    return out
