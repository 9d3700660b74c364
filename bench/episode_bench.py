"""Episodes recalled by time (issue #48 item 6): does the right past conversation reach the
model, what does it cost per turn, and what do the summaries cost.

    uv run --frozen python -m bench.episode_bench [--seed 48] [--markdown] [--locomo PATH]

Data: the generated multi-session set (:mod:`bench.episode_data`: 44 chats, Chinese and
English, private and groups) and, as a public-data check, LoCoMo's sessions with their
dates (:mod:`bench.episode_locomo`). Each past conversation becomes an
``EpisodeRecord`` with the plugin's extractive summary
(``ranking/episode_extract.extract_episode``). Each question is asked at its own moment:
the episodes already closed then (idle gap passed) go through the plugin's
``ranking/episode_cues.episode_question`` and ``ranking/episode_pick.pick_episodes``
(``before``: where the current conversation starts; ``limit``: ``recall_max_episodes``),
and the picked ones through the ``<EPISODES>`` renderer. Every member line of every
conversation is a turn too (asked at its time): a turn that is no question about the past
must add nothing.

Figures, dev and held-out apart: share of questions whose gold episode is picked; share
of no-episode questions (and of ordinary turns) given one; ``<EPISODES>`` characters per
turn that got a block and over all turns; extractive summary characters per episode and per
message; characters and background tokens per message of the summary requests
(``prompting/episode_summary.summary_messages``, instructions included; the bundled XLM-R
tokenizer, as :mod:`bench.cost_metrics`). Limits are ``[episodes]``'s defaults
(``EpisodesConfig()``), times in an ``OwnerCalendar`` of Asia/Shanghai. The bench holds no
ranking rule: it only calls the plugin's functions (:func:`extract`, :func:`recall`,
:func:`summary_request`).
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from .episode_data import SEED, Chat, Conversation, build_set
from .episode_locomo import LOCOMO_DEV, locomo_chats
from .harness import ROOT, bench_env
from .locomo_data import load_conversations
from .recall_report import _table

if TYPE_CHECKING:
    from amrita_plugin_memory.core.calendar import OwnerCalendar
    from amrita_plugin_memory.core.config_sections import EpisodesConfig
    from amrita_plugin_memory.core.episodes import EpisodeLine, EpisodeRecord

DEFAULT_LOCOMO = next(
    (
        d / "shared" / "data" / "locomo" / "locomo_observations.json"
        for d in (ROOT.parent, ROOT.parent.parent)  # a checkout, or a worktree one level down
        if (d / "shared" / "data" / "locomo").is_dir()
    ),
    ROOT.parent / "shared" / "data" / "locomo" / "locomo_observations.json",
)


def _config() -> EpisodesConfig:
    """The ``[episodes]`` defaults (recall_max_episodes, recall_max_chars, short_chars,
    max_request_chars): the bench measures what an owner gets without changing them."""
    from amrita_plugin_memory.core.config_sections import EpisodesConfig

    return EpisodesConfig()


def _calendar() -> OwnerCalendar:
    """The owner's calendar of the data (its days and times are in Asia/Shanghai)."""
    from amrita_plugin_memory.core.calendar import OwnerCalendar

    return OwnerCalendar.named("Asia/Shanghai")


# The plugin's modules are imported inside the functions: importing the package loads
# NoneBot's plugins, which only works inside :func:`bench_env`.


def _lines(chat: Chat, conv: Conversation) -> list[EpisodeLine]:
    """``conv``'s messages as the plugin keeps them (``EpisodeLine``)."""
    from amrita_plugin_memory.core.episodes import EpisodeLine
    from amrita_plugin_memory.core.records import ORIGIN_PRIVATE, origin_of_group
    from amrita_plugin_memory.storage.keys import group_key, user_key

    key = group_key(chat.id) if chat.is_group else user_key(chat.id)
    origin = origin_of_group(chat.id) if chat.is_group else ORIGIN_PRIVATE
    return [
        EpisodeLine(key, origin, ln.user_id, ln.text, ln.at.timestamp(), ln.name, ln.is_bot)
        for ln in conv.lines
    ]


def _speaker(chat: Chat) -> Callable[[EpisodeLine], str]:
    """A line's speaker label: the member's name, ``你`` for the bot."""
    names = {m.user_id: m.name for m in chat.members}
    return lambda line: "你" if line.is_bot else names.get(line.user_id) or line.user_id


def extract(chat: Chat, conv: Conversation) -> EpisodeRecord:
    """The conversation kept as an episode with the plugin's extractive summary."""
    from amrita_plugin_memory.core.episodes import EpisodeRecord
    from amrita_plugin_memory.ranking.episode_extract import extract_episode

    lines = _lines(chat, conv)
    summary, topics = extract_episode(lines, _speaker(chat))
    speakers = dict.fromkeys(ln.user_id for ln in conv.lines if not ln.is_bot)
    return EpisodeRecord(
        id=conv.id,
        chat=lines[0].chat,
        origin=lines[0].origin,
        start=conv.start.timestamp(),
        end=conv.end.timestamp(),
        day=conv.day.isoformat(),
        participants=tuple(speakers),
        summary=summary,
        topics=tuple(topics),
        source="extract",
        messages=len(conv.lines),
        chars=sum(len(ln.text) for ln in conv.lines),
    )


def recall(
    chat: Chat, episodes: Sequence[EpisodeRecord], text: str, now: datetime, before: datetime
) -> tuple[list[EpisodeRecord], str]:
    """What the plugin gives the model for ``text`` at ``now``: the picked episodes and the
    ``<EPISODES>`` block (``""``: none). ``before``: where the current conversation starts."""
    from amrita_plugin_memory.prompting.blocks import render_episodes_block
    from amrita_plugin_memory.ranking.episode_cues import episode_question
    from amrita_plugin_memory.ranking.episode_pick import pick_episodes

    config = _config()
    ask = episode_question(text, now)
    if ask is None:
        return [], ""
    picked = pick_episodes(
        list(episodes), ask, before=before.timestamp(), limit=config.recall_max_episodes
    )
    if not picked:
        return [], ""
    names = {m.user_id: m.name for m in chat.members}
    name_of = (lambda uid: names.get(uid) or uid) if chat.is_group else None
    block = render_episodes_block(picked, _calendar(), name_of, max_chars=config.recall_max_chars)
    return picked, block


def summary_request(chat: Chat, conv: Conversation) -> str:
    """The background model's summary request of ``conv``, its messages' text joined
    (``""``: none is sent: a short conversation keeps its extractive summary)."""
    from amrita_plugin_memory.prompting.episode_summary import summary_messages

    config = _config()
    if len(conv.lines) <= 2 and sum(len(ln.text) for ln in conv.lines) <= config.short_chars:
        return ""
    messages = summary_messages(
        _lines(chat, conv), _speaker(chat), config.max_request_chars, calendar=_calendar()
    )
    return "\n".join(m["content"] for m in messages)


# -- measuring -------------------------------------------------------------------------------


@dataclass
class Figures:
    """One split's counts."""

    asked: int = 0
    hit: int = 0
    none_asked: int = 0
    none_given: int = 0
    turns: int = 0
    turns_given: int = 0
    block_chars: list[int] = field(default_factory=list)  # per turn that got a block
    all_turns: int = 0  # questions + ordinary turns
    episodes: int = 0
    messages: int = 0
    summary_chars: int = 0
    request_chars: int = 0
    request_tokens: int = 0
    by_kind: dict[str, list[int]] = field(default_factory=dict)  # kind -> [asked, hit]


def _measure_chat(chat: Chat, fig: Figures, tokens: Callable[[str], int]) -> None:
    records = {c.id: extract(chat, c) for c in chat.conversations}
    for conv in chat.conversations:
        record = records[conv.id]
        fig.episodes += 1
        fig.messages += len(conv.lines)
        fig.summary_chars += len(record.summary) + sum(len(t) for t in record.topics)
        request = summary_request(chat, conv)
        if request:
            fig.request_chars += len(request)
            fig.request_tokens += tokens(request)
        for ln in conv.lines:  # ordinary turns: a member's line, asked at its time
            if ln.is_bot:
                continue
            closed = [records[c.id] for c in chat.closed_before(ln.at)]
            picked, block = recall(chat, closed, ln.text, ln.at, conv.start)
            fig.turns += 1
            fig.all_turns += 1
            fig.turns_given += bool(picked)
            if block:
                fig.block_chars.append(len(block))
    for q in chat.questions:
        closed = [records[c.id] for c in chat.closed_before(q.now)]
        picked, block = recall(chat, closed, q.text, q.now, q.before)
        fig.all_turns += 1
        if block:
            fig.block_chars.append(len(block))
        if q.gold is None:
            fig.none_asked += 1
            fig.none_given += bool(picked)
            continue
        got = q.gold in {e.id for e in picked}
        fig.asked += 1
        fig.hit += got
        kind = f"{q.kind} {q.detail}".strip()
        row = fig.by_kind.setdefault(kind, [0, 0])
        row[0] += 1
        row[1] += got


def measure(chats: Sequence[Chat], tokens: Callable[[str], int]) -> dict[str, Figures]:
    out = {"dev": Figures(), "held-out": Figures()}
    for chat in chats:
        _measure_chat(chat, out[chat.split], tokens)
    return out


def _share(a: int, b: int) -> str:
    return f"{a / b:.3f} ({a}/{b})" if b else "—"


def _per(a: float, b: float) -> str:
    return f"{a / b:.1f}" if b else "—"


def report(figs: dict[str, Figures], *, markdown: bool) -> str:
    header = ["figure", *figs]
    rows: list[list[str]] = []

    def row(name: str, fn: Callable[[Figures], str]) -> None:
        rows.append([name, *(fn(f) for f in figs.values())])

    row("gold episode picked", lambda f: _share(f.hit, f.asked))
    kinds = sorted({k for f in figs.values() for k in f.by_kind})
    for kind in kinds:
        row(f"  {kind}", lambda f, k=kind: _share(*f.by_kind.get(k, [0, 0])[::-1]))
    row("no-episode questions given one", lambda f: _share(f.none_given, f.none_asked))
    row("ordinary turns given one", lambda f: _share(f.turns_given, f.turns))
    row("<EPISODES> chars / turn with one", lambda f: _per(sum(f.block_chars), len(f.block_chars)))
    row("<EPISODES> chars / turn (all)", lambda f: _per(sum(f.block_chars), f.all_turns))
    row("summary chars / episode", lambda f: _per(f.summary_chars, f.episodes))
    row("summary chars / message", lambda f: _per(f.summary_chars, f.messages))
    row("request chars / message", lambda f: _per(f.request_chars, f.messages))
    row("request tokens / message", lambda f: _per(f.request_tokens, f.messages))
    return "\n".join(_table(header, rows, markdown))


def _tokens(text: str) -> int:
    from .cost_metrics import _tokens as count

    return count(text)


async def main(seed: int, locomo: list[Chat], markdown: bool) -> None:
    """``locomo``: LoCoMo's conversations as chats (empty: the check is skipped)."""
    es = build_set(seed)
    questions = sum(len(c.questions) for c in es.chats)
    convs = sum(len(c.conversations) for c in es.chats)
    print(f"episode set (seed {seed}): {len(es.chats)} chats, {convs} conversations, ", end="")
    print(f"{questions} questions")
    async with bench_env():
        print(report(measure(es.chats, _tokens), markdown=markdown))
        if locomo:
            asked = sum(len(c.questions) for c in locomo)
            print(f"\nLoCoMo sessions as episodes ({len(locomo)} conversations, ", end="")
            print(f"{asked} date questions; dev 1–{LOCOMO_DEV}):\n")
            print(report(measure(locomo, _tokens), markdown=markdown))


def load_locomo(path: Path) -> list[Chat]:
    if not path.exists():
        print(f"LoCoMo check skipped: {path} not found")
        return []
    return locomo_chats(load_conversations(path))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--locomo", type=Path, default=DEFAULT_LOCOMO)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    asyncio.run(main(args.seed, load_locomo(args.locomo), args.markdown))
