"""The recall benchmark's data set: users, their memory writes, and the queries.

Chinese-first and bilingual: most users chat in Chinese (with English tokens
such as Steam, wifi, UID, plate numbers), every seventh user in English. Each
user gets, in the order a chat model would have written them over the last
weeks (``age_days`` ago):

* 40 facts from :data:`bench.recall_facts.FACTS` (confusable pairs included);
* 5 changed facts (:data:`bench.recall_facts.CHANGES`): the old value ~60 days
  ago, the new value in the last two weeks, two separate memories;
* 6 repeats: a fact told again in other words, later (what dedup-on-write
  should merge).

Queries of four kinds: ``paraphrase`` (a question in other words),
``exact`` (a token alone: ``A1037``, ``1602``, ``年糕``), ``token_in_sentence``
(``A1037 那个是什么来着``) and ``latest`` (the current value of a changed
fact), plus unscored leakage probes (:data:`PROBE`). An expected answer is a set of fact keys, never the id of one write:
any memory whose content is a text of such a fact counts, so a merged repeat
is as good as the first write. For token queries the set is every fact of the
partition whose text contains the token.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from .recall_facts import CHANGES, FACTS, INDIRECT, TOKEN_SENTENCES, Change, Fact
from .recall_profiles import make_profile

__all__ = [
    "FULL",
    "KINDS",
    "PROBE",
    "QUICK",
    "Query",
    "RecallDataset",
    "Shape",
    "UserData",
    "Write",
    "make_recall_dataset",
]

KINDS = ("paraphrase", "exact", "token_in_sentence", "latest")
PROBE = "probe"
"""Not scored: another user's exact token, found only in that user's partition
(what a keyword channel that ignored the partition would return)."""


@dataclass(frozen=True, slots=True)
class Shape:
    """How much of everything one user gets."""

    facts: int
    changes: int
    repeats: int
    paraphrase: int
    exact: int
    token_in_sentence: int


FULL = Shape(facts=40, changes=5, repeats=6, paraphrase=12, exact=6, token_in_sentence=6)
QUICK = Shape(facts=12, changes=3, repeats=2, paraphrase=4, exact=2, token_in_sentence=2)


@dataclass(frozen=True, slots=True)
class Write:
    """One ``write_memory`` call."""

    key: str  # fact key; ``<change>.old`` / ``<change>.new`` for changed facts
    text: str
    tags: tuple[str, ...]
    importance: str
    age_days: float  # written this long before the benchmark's "now"
    repeat: bool = False  # the same fact told again (a merge is expected)


@dataclass(frozen=True, slots=True)
class Query:
    kind: str
    text: str
    expected: frozenset[str]  # fact keys; any memory holding one of their texts is right


@dataclass(slots=True)
class UserData:
    index: int
    lang: str
    writes: list[Write] = field(default_factory=list)  # oldest first
    queries: list[Query] = field(default_factory=list)

    def text_keys(self) -> dict[str, str]:
        """Every text written for this user -> its fact key."""
        return {w.text: w.key for w in self.writes}

    def first_text(self, key: str) -> str:
        return next(w.text for w in self.writes if w.key == key)


@dataclass(slots=True)
class RecallDataset:
    users: list[UserData]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = dict.fromkeys(KINDS, 0)
        for user in self.users:
            for q in user.queries:
                if q.kind in out:
                    out[q.kind] += 1
        return out

    @property
    def probes(self) -> int:
        return sum(q.kind == PROBE for u in self.users for q in u.queries)

    @property
    def writes(self) -> int:
        return sum(len(u.writes) for u in self.users)


def _lang(index: int) -> str:
    return "en" if index % 7 == 3 else "zh"


def _texts(fact: Fact, lang: str) -> tuple[tuple[str, ...], tuple[str, ...], str]:
    """Memory phrasings, questions (the indirect one included) and the tag of ``fact``."""
    zh, en = INDIRECT[fact.key]
    if lang == "zh":
        return fact.zh, (*fact.zh_q, zh), fact.tag_zh
    return fact.en, (*fact.en_q, en), fact.tag_en


def _change_writes(change: Change, lang: str, p: dict[str, str], rng: random.Random) -> list[Write]:
    old, news, tag = (
        (change.zh_old, change.zh_new, change.tag_zh)
        if lang == "zh"
        else (change.en_old, change.en_new, change.tag_en)
    )
    new = rng.choice(news)  # sometimes "now ...", sometimes only the plain new fact
    return [
        Write(f"{change.key}.old", old.format(**p), (tag,), change.importance, rng.uniform(55, 70)),
        Write(f"{change.key}.new", new.format(**p), (tag,), change.importance, rng.uniform(1, 14)),
    ]


def _token_expected(writes: list[Write], token: str) -> frozenset[str]:
    return frozenset(w.key for w in writes if token in w.text)


def make_user(index: int, shape: Shape) -> UserData:
    """The writes and queries of user ``index`` (deterministic)."""
    rng = random.Random(7_000 + index)
    lang = _lang(index)
    p = make_profile(index, lang)
    user = UserData(index, lang)
    facts = rng.sample(list(FACTS), shape.facts)
    ages = {f.key: rng.uniform(3, 80) for f in facts}
    for fact in facts:
        texts, _, tag = _texts(fact, lang)
        user.writes.append(
            Write(fact.key, texts[0].format(**p), (tag,), fact.importance, ages[fact.key])
        )
    for fact in rng.sample(facts, shape.repeats):
        texts, _, tag = _texts(fact, lang)
        text = rng.choice(texts[1:]).format(**p)
        age = ages[fact.key] * rng.uniform(0.1, 0.8)
        user.writes.append(Write(fact.key, text, (tag,), fact.importance, age, repeat=True))
    changes = rng.sample(list(CHANGES), shape.changes)
    for change in changes:
        user.writes.extend(_change_writes(change, lang, p, rng))
    user.writes.sort(key=lambda w: -w.age_days)
    _check_unique(user)

    for fact in rng.sample(facts, shape.paraphrase):
        _, questions, _ = _texts(fact, lang)
        text = rng.choice(questions).format(**p)
        user.queries.append(Query("paraphrase", text, frozenset({fact.key})))
    with_token = [f for f in facts if f.token is not None]
    picked = rng.sample(with_token, min(len(with_token), shape.exact + shape.token_in_sentence))
    for n, fact in enumerate(picked):
        assert fact.token is not None
        token = p[fact.token]
        expected = _token_expected(user.writes, token)
        if n < shape.exact:
            user.queries.append(Query("exact", token, expected))
        else:
            sentence = rng.choice(TOKEN_SENTENCES[lang]).format(t=token)
            user.queries.append(Query("token_in_sentence", sentence, expected))
    for change in changes:
        text = rng.choice(change.zh_q if lang == "zh" else change.en_q).format(**p)
        user.queries.append(Query("latest", text, frozenset({f"{change.key}.new"})))
    return user


def _check_unique(user: UserData) -> None:
    """Two writes of different facts must never have the same text (the answer key)."""
    seen: dict[str, str] = {}
    for w in user.writes:
        if seen.setdefault(w.text, w.key) != w.key:
            raise ValueError(f"user {user.index}: the same text for {seen[w.text]} and {w.key}")


def _add_probes(data: RecallDataset) -> None:
    """Each user also asks for the exact tokens of the next user (leakage probes)."""
    for n, user in enumerate(data.users):
        other = data.users[(n + 1) % len(data.users)]
        if other is user:
            continue
        for q in other.queries:
            if q.kind == "exact" and not any(q.text in w.text for w in user.writes):
                user.queries.append(Query(PROBE, q.text, frozenset()))


def make_recall_dataset(users: int, shape: Shape = FULL, first: int = 0) -> RecallDataset:
    """Users ``first`` … ``first + users - 1`` (each one's data depends on its index only)."""
    data = RecallDataset([make_user(i, shape) for i in range(first, first + users)])
    _add_probes(data)
    return data


if __name__ == "__main__":  # a look at the data: python -m bench.recall_data
    ds = make_recall_dataset(20)
    print(f"{len(ds.users)} users, {ds.writes} writes, queries {ds.counts()}")
    sample = ds.users[0]
    for w in sample.writes[:8]:
        print(f"  {w.age_days:5.1f} d  {w.key:16} {w.text}")
    for q in sample.queries[::4]:
        print(f"  {q.kind:18} {q.text}  -> {sorted(q.expected)}")
