"""Active recall without embeddings: the keyword floor (issue #47).

    uv run --frozen python -m bench.active_keywords [--memorybank PATH] [--locomo PATH]

With ``EMBEDDING_ENABLED=false`` (or the embedding service down) active recall shows a
memory when its share of the message's keyword weight (CJK terms at full weight:
:meth:`MemoryStore.keyword_matches`) reaches a floor
(:data:`amrita_plugin_memory.active.recall.KEYWORD_FLOOR`) and it shares enough keyword
terms with the message (:data:`~amrita_plugin_memory.active.recall.KEYWORD_MIN_TERMS`:
the share alone counts only the terms found in the partition). This bench measures it on
public data, through a real store with embeddings disabled (every memory pending):

- each user of MemoryBank-CN (``../shared/data/memorybank_cn``; dev: users 1–4) and each
  LoCoMo conversation (``../shared/data/locomo``; dev: conversations 1–3) gets its own
  partition, one memory per turn / observation;
- *related*: each question with evidence, against its own user's memories: does an
  evidence memory come among the ``recall_top_k`` (3) best with a share ≥ the floor?
- *unrelated*: (a) the next user's questions (another person's life) against this user's
  memories, (b) everyday chat lines (``bench.active_bench.CHITCHAT``: "在吗", "哈哈哈哈",
  "good night", …) against every user's memories: does any memory reach the floor (a
  ``<MEMORIES>`` block for nothing)?

For each candidate (floor, terms) it prints both shares per dataset and split; the floor is the
one with the largest "related kept − unrelated with a block" over both datasets' dev
splits (the held-out figures are reported, never used to choose).
``recall_top_k`` memories are looked at, as recall does.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.helpers import new_memory

from .active_bench import CHITCHAT
from .harness import bench_env
from .locomo_data import Conversation, load_conversations
from .memorybank_data import load_users

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data"
FLOORS = [round(0.1 * i, 1) for i in range(0, 11)]
TERMS = [1, 2, 3, 4]
RULES = [(floor, terms) for terms in TERMS for floor in FLOORS]
TOP_K = 3
"""``[active_memory] recall_top_k``'s default: the memories recall looks at."""
DEV = {"MemoryBank-CN": 4, "LoCoMo": 3}
"""The first users / conversations of each dataset: the dev split (as its own bench)."""


Hits = list[tuple[str, float]]
"""A message's top-k keyword matches: each memory's text and its share."""


@dataclass
class Split:
    related: list[tuple[str, Hits]] = field(default_factory=list)
    """Per question: the question and its evidence memories among the top k."""
    others: list[tuple[str, Hits]] = field(default_factory=list)
    """Per other user's question: the question and the top k of this user's memories."""
    chat: list[tuple[str, Hits]] = field(default_factory=list)
    """Per chat line and user: the line and the top k of the user's memories."""


async def _measure(
    rt: Any, name: str, users: Sequence[Conversation], base: int
) -> dict[str, Split]:
    from amrita_plugin_memory.storage.keys import target_from_ids
    from amrita_plugin_memory.storage.scope import Scope

    store = rt.store
    views: list[Any] = []
    turns: list[dict[str, frozenset[str]]] = []
    for u, user in enumerate(users):
        target = target_from_ids(str(base + u))
        view = Scope.of_loop(target).view("user")
        by_id: dict[str, frozenset[str]] = {}
        for obs in user.observations:
            result = await store.write(new_memory(view.partition, "user", obs.text))
            by_id[result.record.id] = by_id.get(result.record.id, frozenset()) | obs.turns
        views.append(view)
        turns.append(by_id)

    async def top(view: Any, text: str) -> Hits:
        hits = await store.keyword_matches(view, text, top_k=TOP_K)
        return [(r.content, share) for r, share in hits]

    splits = {"dev": Split(), "held-out": Split()}
    for u, user in enumerate(users):
        split = splits["dev" if u < DEV[name] else "held-out"]
        view = views[u]
        for q in user.questions:
            hits = await store.keyword_matches(view, q.text, top_k=TOP_K)
            evidence = [
                (r.content, s) for r, s in hits if turns[u].get(r.id, frozenset()) & q.evidence
            ]
            split.related.append((q.text, evidence))
        other = users[(u + 1) % len(users)]
        split.others += [(q.text, await top(view, q.text)) for q in other.questions]
        split.chat += [(line, await top(view, line)) for line in CHITCHAT]
    return splits


Rule = tuple[float, int]
"""A candidate: the share floor and the terms a memory must share with the message."""


def _share(messages: Sequence[tuple[str, Hits]], rule: Rule) -> float:
    from amrita_plugin_memory.active.recall import keyword_passes

    floor, terms = rule
    passed = sum(
        any(keyword_passes(text, content, s, floor=floor, terms=terms) for content, s in hits)
        for text, hits in messages
    )
    return passed / max(1, len(messages))


def _table(name: str, splits: dict[str, Split]) -> list[str]:
    lines = [f"### {name}", ""]
    head = ["floor", "terms"]
    for split, s in splits.items():
        head += [
            f"{split}: evidence passes ({len(s.related)})",
            f"{split}: false block, other user's questions ({len(s.others)})",
            f"{split}: false block, chat lines ({len(s.chat)})",
        ]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for rule in RULES:
        cells = [f"{rule[0]:.2f}", str(rule[1])]
        for s in splits.values():
            cells += [f"{_share(v, rule):.3f}" for v in (s.related, s.others, s.chat)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _score(results: dict[str, dict[str, Split]], rule: Rule) -> float:
    """Dev: evidence kept − unrelated with a block, averaged over the datasets (each dataset's
    unrelated messages pooled: other users' questions and chat lines)."""
    total = 0.0
    for splits in results.values():
        s = splits["dev"]
        total += _share(s.related, rule) - _share(s.others + s.chat, rule)
    return total / max(1, len(results))


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--memorybank", type=Path, default=DATA / "memorybank_cn" / "memorybank_cn.json"
    )
    parser.add_argument("--locomo", type=Path, default=DATA / "locomo" / "locomo_observations.json")
    args = parser.parse_args(argv)
    results: dict[str, dict[str, Split]] = {}
    async with bench_env() as env:
        from .recall_run import STEPS, build_runtime, embedder_env

        no_vectors = {**embedder_env("local", "", "e5"), "embedding_enabled": False}
        rt = build_runtime(env.work / "keywords", STEPS[-1], no_vectors)
        env.runtimes.append(rt)
        assert rt.store.vectors.enabled is False
        if args.memorybank.exists():
            results["MemoryBank-CN"] = await _measure(
                rt, "MemoryBank-CN", load_users(args.memorybank), 700_000
            )
        if args.locomo.exists():
            results["LoCoMo"] = await _measure(
                rt, "LoCoMo", load_conversations(args.locomo), 710_000
            )
    out = ["## Active recall by keywords (embeddings disabled)", ""]
    for name, splits in results.items():
        out += [*_table(name, splits), ""]
    if results:
        best = max(RULES, key=lambda r: (_score(results, r), r))
        out.append(
            f"Dev optimum (largest evidence kept − unrelated with a block, mean over "
            f"{', '.join(results)}): floor {best[0]:.2f}, {best[1]} shared terms "
            f"(dev gain {_score(results, best):.3f})"
        )
    else:
        out.append("No data found: nothing measured.")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
