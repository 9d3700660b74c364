"""An extractive episode: topics and key lines of a conversation, without a model (issue #48).

What is kept when the background model is not asked (a short conversation,
the budget spent) or fails or answers badly, so no conversation is missing from
the record. Deterministic: the same lines give the same summary.

Topics are the conversation's most characteristic content terms: the members'
lines are split at cue, time and question words, pronouns and particles
(:func:`~.episode_cues.content_runs`); a CJK piece of two to four characters
counts as a word, and every piece by its bigrams; an English word (four letters
or more, no stop word, no number) as itself, counted by its stem. A term
scores the number of lines it occurs in (said again and again: what the
conversation was about), then its length; ties go to the term said first.
The summary names the topics and quotes the members' lines that hold most
of them, in the order they were said, each ``name：text``, within
:data:`~..core.episodes.SUMMARY_MAX_CHARS`, labelled in the conversation's own
language (话题 for a Chinese one, "Topics" otherwise).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..core.episodes import SUMMARY_MAX_CHARS, EpisodeLine
from ..core.text import cut, single_line
from .episode_cues import content_runs, is_stop_term
from .keywords import keyword_terms
from .when import has_cjk

__all__ = ["MAX_TOPICS", "extract_episode", "is_chinese"]

MAX_TOPICS = 5
LINE_CHARS = 60
"""A quoted line is cut to this many characters (several fit in a summary)."""
_TRAILING = "。；;，,、. "
"""Trailing punctuation dropped from a quoted line (the separator follows it)."""


def is_chinese(texts: Sequence[str]) -> bool:
    """Whether a conversation is Chinese: CJK characters outnumber English words."""
    joined = " ".join(texts)
    if not has_cjk(joined):
        return False
    cjk = sum(1 for ch in joined if has_cjk(ch))
    words = sum(1 for word in joined.split() if word.isascii() and any(c.isalpha() for c in word))
    return cjk >= words


def _candidates(text: str) -> list[tuple[str, str]]:
    """``(key, shown)`` topic candidates of one line: CJK words or bigrams, English words."""
    found: list[tuple[str, str]] = []
    for run in content_runs(text):
        if run.isascii():
            if run.isalpha() and len(run) >= 4 and not is_stop_term(run):
                stems = keyword_terms(run)
                if stems and not is_stop_term(stems[0]):
                    found.append((stems[0], run))
            continue
        cjk = "".join(ch for ch in run if not ch.isascii())
        ascii_words = [w for w in run.split() if w.isascii()]
        pieces = [cjk[i : i + 2] for i in range(len(cjk) - 1)] or ([cjk] if cjk else [])
        if 3 <= len(cjk) <= 4 and cjk == run:
            pieces.append(cjk)
        found.extend((p, p) for p in pieces if not is_stop_term(p))
        found.extend((w, w) for w in ascii_words if len(w) >= 4 and w.isalpha())
    return found


def _topics(texts: Sequence[str]) -> list[str]:
    lines_of: dict[str, int] = {}
    shown: dict[str, str] = {}
    first: dict[str, int] = {}
    order = 0
    for text in texts:
        seen: set[str] = set()
        for key, word in _candidates(text):
            if key not in first:
                first[key], shown[key] = order, word
                order += 1
            if key not in seen:
                seen.add(key)
                lines_of[key] = lines_of.get(key, 0) + 1
    ranked = sorted(first, key=lambda k: (-lines_of[k], -len(shown[k]), first[k]))
    topics: list[str] = []
    for key in ranked:
        word = shown[key]
        # A bigram inside a word already chosen adds nothing ("火锅" beside "火锅店").
        if any(word in chosen or chosen in word for chosen in topics):
            continue
        topics.append(word)
        if len(topics) == MAX_TOPICS:
            break
    return topics


def _line_score(text: str, topics: Sequence[str]) -> int:
    low = text.lower()
    return sum(1 for topic in topics if topic.lower() in low)


def extract_episode(
    lines: Sequence[EpisodeLine], name_of: Callable[[EpisodeLine], str]
) -> tuple[str, tuple[str, ...]]:
    """``(summary, topics)`` of a conversation, without a model (see the module docstring).

    ``name_of`` gives the label a line's speaker is shown by (``用户_1234``,
    ``Alice``; the caller applies the chat's anonymisation rules). The bot's
    own lines count only when no member spoke.
    """
    spoken = [line for line in lines if line.text.strip()]
    members = [line for line in spoken if not line.is_bot] or spoken
    if not members:
        return "", ()
    texts = [single_line(line.text) for line in members]
    topics = _topics(texts)
    chinese = is_chinese(texts)
    head = ""
    if topics:
        head = f"话题：{'、'.join(topics)}。" if chinese else f"Topics: {', '.join(topics)}. "
    sep, colon = ("；", "：") if chinese else ("; ", ": ")
    room = SUMMARY_MAX_CHARS - len(head)
    # The lines holding most topics first (ties: the earlier), shown in the order said.
    ranked = sorted(range(len(members)), key=lambda i: (-_line_score(texts[i], topics), i))

    def quote(index: int) -> str:
        # A sentence's own full stop or comma before the separator would read "。；".
        said = cut(texts[index], LINE_CHARS).rstrip(_TRAILING) or texts[index]
        return f"{name_of(members[index])}{colon}{said}"

    chosen: list[int] = []
    used = 0
    for index in ranked:
        quoted = quote(index)
        cost = len(quoted) + (len(sep) if chosen else 0)
        if used + cost > room:
            continue
        chosen.append(index)
        used += cost
    quotes = [quote(i) for i in sorted(chosen)]
    summary = cut(head + sep.join(quotes), SUMMARY_MAX_CHARS).strip()
    return summary, tuple(topics)
