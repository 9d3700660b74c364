"""Which past conversations answer an :class:`~.episode_cues.EpisodeAsk` (issue #48).

Pure and deterministic (no storage, no framework): the caller reads a chat's
episodes through its view and passes them here. ``before`` is when the current
conversation began (UTC seconds): an episode ending after it is the current
conversation, never "上次", and is left out for every kind (the current
conversation is in the chat history already).

Topic match: an episode's terms are the keyword terms of its summary and
topics; the ask's share found there is the number of its terms found over all of
them. A match needs at least one shared term and a share of at least
:data:`MIN_SHARE`. Once the cue, time and question words are masked
(:func:`~.episode_cues.content_terms`) a question keeps one to four terms
("面试"; "火锅 锅店"; "good book rome"), so a third means one term of three;
a longer message that shares only an incidental term with an episode (one word
in seven) is chit-chat and matches nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..core.episodes import EpisodeRecord
from .episode_cues import EpisodeAsk
from .keywords import keyword_terms

__all__ = ["MIN_SHARE", "pick_episodes", "topic_share"]

MIN_SHARE = 1 / 3
"""The least share of the ask's terms an episode must hold to match (see the module docstring)."""


def _terms(episode: EpisodeRecord) -> set[str]:
    return set(keyword_terms(" ".join((episode.summary, *episode.topics))))


def topic_share(episode: EpisodeRecord, terms: Sequence[str]) -> float:
    """The share of ``terms`` found in ``episode``'s summary and topics (0 when it is
    below :data:`MIN_SHARE` or no term is shared)."""
    wanted = set(terms)
    if not wanted:
        return 0.0
    shared = len(wanted & _terms(episode))
    share = shared / len(wanted)
    return share if shared and share >= MIN_SHARE else 0.0


def _newest_first(episodes: Sequence[EpisodeRecord]) -> list[EpisodeRecord]:
    return sorted(episodes, key=lambda e: (-e.end, -e.start, e.id))


def _oldest_first(episodes: Sequence[EpisodeRecord]) -> list[EpisodeRecord]:
    return sorted(episodes, key=lambda e: (e.start, e.end, e.id))


def _matching(episodes: Sequence[EpisodeRecord], terms: Sequence[str]) -> list[EpisodeRecord]:
    """The episodes matching ``terms``, best share first, ties newest first."""
    scored = [(topic_share(e, terms), e) for e in episodes]
    ranked = sorted(
        ((share, e) for share, e in scored if share > 0),
        key=lambda pair: (-pair[0], -pair[1].end, -pair[1].start, pair[1].id),
    )
    return [e for _, e in ranked]


def pick_episodes(
    episodes: Sequence[EpisodeRecord], ask: EpisodeAsk, *, before: float, limit: int
) -> list[EpisodeRecord]:
    """The episodes that answer ``ask``, oldest first (for display), at most ``limit``.

    - ``last``: the latest episode ended by ``before``; when the ask's terms match
      some episode, the most recent matching one ("上次说的面试" → where 面试 came up);
    - ``first``: the earliest;
    - ``period``: those overlapping the period, newest first up to ``limit``, matching ones first;
    - ``topic``: those matching the ask's terms, best share first, ties newest first;
      none matching: ``[]``.
    """
    if limit <= 0:
        return []
    past = [e for e in episodes if not e.archived and e.end <= before]
    if not past:
        return []
    terms = ask.topic_terms
    if ask.kind == "last":
        matching = _matching(past, terms) if terms else []
        if matching:
            return [_newest_first(matching)[0]]
        return [_newest_first(past)[0]]
    if ask.kind == "first":
        return [_oldest_first(past)[0]]
    if ask.kind == "period":
        if ask.period is None:
            return []
        start, end = ask.period.start.timestamp(), ask.period.end.timestamp()
        inside = [e for e in past if e.start < end and e.end >= start]
        matching = _matching(inside, terms) if terms else []
        rest = [e for e in _newest_first(inside) if e not in matching]
        return _oldest_first((matching + rest)[:limit])
    return _oldest_first(_matching(past, terms)[:limit]) if terms else []
