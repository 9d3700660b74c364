"""Episode rows as records, and the shapes the store's answers take (``store.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from ...core.episodes import EPISODE_SOURCES, EpisodeLine, EpisodeRecord
from ..models import Episode, EpisodeLineRow

__all__ = ["MAX_READ", "ForgottenEpisodes", "OpenChat", "as_line", "as_record", "seconds", "us"]

MAX_READ = 500
"""Episodes one read returns at most (a bound: a chat of years costs no more)."""


def us(seconds: float) -> int:
    return round(seconds * 1_000_000)


def seconds(us: int) -> float:
    return us / 1_000_000


def as_record(row: Episode) -> EpisodeRecord:
    source = row.source if row.source in EPISODE_SOURCES else "extract"
    return EpisodeRecord(
        id=row.id,
        chat=row.chat,
        origin=row.origin,
        start=seconds(row.start_us),
        end=seconds(row.end_us),
        day=row.day,
        participants=tuple(str(p) for p in row.participants or ()),
        summary=row.summary,
        topics=tuple(str(t) for t in row.topics or ()),
        source=source,  # type: ignore[arg-type]
        messages=row.messages,
        chars=row.chars,
        archived=row.archived_us is not None,
    )


def as_line(row: EpisodeLineRow) -> EpisodeLine:
    return EpisodeLine(
        chat=row.chat,
        origin=row.origin,
        user_id=row.user_id,
        text=row.text,
        at=seconds(row.at_us),
        name=row.name,
        is_bot=row.is_bot,
        id=row.id,
    )


@dataclass(frozen=True, slots=True)
class OpenChat:
    """A chat with lines of a conversation not kept yet."""

    chat: str
    origin: str
    first: float
    last: float
    lines: int


@dataclass(frozen=True, slots=True)
class ForgottenEpisodes:
    """What a user's forget removed."""

    episodes: int = 0
    lines: int = 0
