"""Active memory's figures: the recall threshold and the cost of extraction.

    uv run --frozen python -m bench.active_bench [--data PATH]

1. **Recall threshold** (``[active_memory] recall_min_similarity``): with the
   bundled multilingual-e5-small (query/passage modes), the cosine similarity
   of a message and a memory, for
   - *related* messages: LoCoMo questions and the observation of their evidence
     turn (public data, ``../shared/data/locomo``; evaluation only), and the
     Chinese paraphrase questions of the project's recall generator and the
     memory they ask about;
   - *unrelated* messages: the same LoCoMo questions against another
     conversation's memories (other people, other lives), and everyday chat
     lines ("在吗", "哈哈", "good night", …) against every memory set.
   For each threshold: the share of related messages whose memory passes
   (it could be recalled) and the share of unrelated messages for which any
   memory passes (a block would be injected for nothing). e5-small scores
   Chinese pairs much higher than English ones, so a message with CJK
   characters has its own threshold (``recall_min_similarity``, the Chinese
   table, Chinese chat lines) and any other message another
   (``recall_min_similarity_non_cjk``, the LoCoMo table, English chat lines).
   The bench prints, for each, the threshold with the largest "related kept −
   unrelated with a block" on its dev split (LoCoMo conversations 1–3,
   generator users 0–9; conversations 4–5 and users 10–19 are reported apart);
   docs/active-memory.md says how the defaults relate to it.
2. **Cost**: characters of one extraction request at ``batch_messages = 4``
   with 200 memories in the partition (``related_memories = 12``), per user
   message, and extraction requests per 100 user messages.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tests.helpers import new_memory

from .harness import bench_env

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "locomo" / "locomo_observations.json"
THRESHOLDS = [round(0.76 + 0.01 * i, 2) for i in range(15)]

CHITCHAT = [
    "在吗",
    "哈哈哈哈",
    "晚安",
    "早上好呀",
    "好的，谢谢",
    "你是谁",
    "讲个笑话吧",
    "今天星期几",
    "帮我写一首关于秋天的诗",
    "1+1等于几",
    "你觉得呢？",
    "嗯嗯",
    "无聊",
    "翻译一下 hello world",
    "what's up",
    "lol",
    "thanks!",
    "good night",
    "tell me a joke",
    "ok",
]
"""Everyday lines that ask for no memory (written here: a counter-example list, not tuning data)."""

CJK_CHAT = [line for line in CHITCHAT if any("\u4e00" <= ch <= "\u9fff" for ch in line)]
OTHER_CHAT = [line for line in CHITCHAT if line not in CJK_CHAT]


@dataclass
class Split:
    related: list[float] = field(default_factory=list)
    """Per related message: the best similarity of a memory it asks about."""
    unrelated: list[float] = field(default_factory=list)
    """Per unrelated message: the best similarity of any memory."""


def _unit(vectors: Sequence[Sequence[float]]) -> np.ndarray:
    m = np.asarray(vectors, dtype=np.float32)
    return m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)


def _locomo(path: Path) -> list[dict[str, Any]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    return list(data["conversations"])


async def _embed(embedder: Any, texts: list[str], kind: str) -> np.ndarray:
    out: list[list[float]] = []
    for i in range(0, len(texts), 64):
        out += await embedder.embed(texts[i : i + 64], kind)
    return _unit(out)


async def _locomo_splits(embedder: Any, convs: list[dict[str, Any]]) -> dict[str, Split]:
    memories: list[np.ndarray] = []
    questions: list[tuple[np.ndarray, list[list[int]]]] = []
    for conv in convs:
        obs = conv["observations"]
        memories.append(await _embed(embedder, [o["text"] for o in obs], "document"))
        by_turn: dict[str, list[int]] = {}
        for i, o in enumerate(obs):
            for turn in o["dia"]:
                by_turn.setdefault(turn, []).append(i)
        asked = [q for q in conv["qa"] if any(t in by_turn for t in q.get("evidence", []))]
        qv = await _embed(embedder, [str(q["question"]) for q in asked], "query")
        rows = [sorted({i for t in q["evidence"] for i in by_turn.get(t, [])}) for q in asked]
        questions.append((qv, rows))
    chat = await _embed(embedder, OTHER_CHAT, "query")
    splits = {"dev": Split(), "held-out": Split()}
    for c, (qv, rows) in enumerate(questions):
        split = splits["dev" if c < 3 else "held-out"]
        sims = qv @ memories[c].T
        split.related += [float(sims[i, r].max()) for i, r in enumerate(rows)]
        other = memories[(c + 1) % len(memories)]
        split.unrelated += [float(s) for s in (qv @ other.T).max(axis=1)]
        split.unrelated += [float(s) for s in (chat @ memories[c].T).max(axis=1)]
    return splits


async def _chinese_splits(embedder: Any) -> dict[str, Split]:
    from .recall_data import FULL, make_recall_dataset

    data = make_recall_dataset(20, FULL)
    chat = await _embed(embedder, CJK_CHAT, "query")
    splits = {"dev": Split(), "held-out": Split()}
    for user in data.users:
        if user.lang != "zh":
            continue
        split = splits["dev" if user.index < 10 else "held-out"]
        texts = list(dict.fromkeys(w.text for w in user.writes))
        mv = await _embed(embedder, texts, "document")
        keys = user.text_keys()
        queries = [q for q in user.queries if q.kind == "paraphrase"]
        qv = await _embed(embedder, [q.text for q in queries], "query")
        for i, q in enumerate(queries):
            rows = [j for j, t in enumerate(texts) if keys.get(t) in q.expected]
            if rows:
                split.related.append(float((qv[i] @ mv[rows].T).max()))
        split.unrelated += [float(s) for s in (chat @ mv.T).max(axis=1)]
    return splits


def _table(title: str, splits: dict[str, Split]) -> list[str]:
    lines = [f"### {title}", ""]
    head = "| threshold | " + " | ".join(
        f"{name}: related kept ({len(s.related)}) | {name}: unrelated with a block ({len(s.unrelated)})"
        for name, s in splits.items()
    )
    lines += [head + " |", "|" + "---|" * (1 + 2 * len(splits))]
    for t in THRESHOLDS:
        cells = []
        for s in splits.values():
            kept = sum(x >= t for x in s.related) / max(1, len(s.related))
            noise = sum(x >= t for x in s.unrelated) / max(1, len(s.unrelated))
            cells += [f"{kept:.3f}", f"{noise:.3f}"]
        lines.append(f"| {t:.2f} | " + " | ".join(cells) + " |")
    return lines


def _youden(splits: dict[str, Split], threshold: float) -> float:
    s = splits["dev"]
    kept = sum(x >= threshold for x in s.related) / max(1, len(s.related))
    noise = sum(x >= threshold for x in s.unrelated) / max(1, len(s.unrelated))
    return kept - noise


def _choice(name: str, splits: dict[str, Split]) -> str:
    best = max(THRESHOLDS, key=lambda t: _youden(splits, t))
    return f"Dev optimum for {name} (largest related kept − unrelated with a block): {best:.2f}"


async def _cost(convs: list[dict[str, Any]], rt: Any) -> list[str]:
    """Request size with 200 memories and a batch of 4, from real LoCoMo texts."""
    from amrita_plugin_memory.active import BatchKey, MemoryExtractor, Turn
    from amrita_plugin_memory.core.records import ORIGIN_PRIVATE
    from amrita_plugin_memory.storage.keys import user_key

    extractor = MemoryExtractor(
        rt.store,
        memory_limit=10_000,
        related_memories=12,
        max_ops=8,
    )
    sizes: list[int] = []
    per_message: list[float] = []
    requests = 0
    messages = 0
    for c, conv in enumerate(convs):
        obs = conv["observations"]
        partition = user_key(900_000 + c)
        for o in obs[:200]:
            await rt.store.add(new_memory(partition, "user", o["text"]))
        key = BatchKey(str(900_000 + c), partition, ORIGIN_PRIVATE)
        tail = obs[200:] or obs[-8:]
        for i in range(0, len(tail) - 3, 4):
            turns = [Turn(o["text"], "好的，我记住了。") for o in tail[i : i + 4]]
            request, _, _ = await extractor.prepare(key, turns)
            chars = sum(len(m["content"]) for m in request)
            sizes.append(chars)
            per_message.append(chars / 4)
        # A session is one sitting: its messages are batched by 4, the rest by the idle timer.
        per_session: dict[str, int] = {}
        for o in obs:
            session = o["dia"][0].split(":")[0]
            per_session[f"{session}/{o['speaker']}"] = (
                per_session.get(f"{session}/{o['speaker']}", 0) + 1
            )
        messages += sum(per_session.values())
        requests += sum(math.ceil(n / 4) for n in per_session.values())
    p50 = float(np.percentile(sizes, 50))
    p95 = float(np.percentile(sizes, 95))
    return [
        "### Extraction cost (batch_messages = 4, related_memories = 12, 200 memories)",
        "",
        f"- characters per extraction request: p50 {p50:.0f}, p95 {p95:.0f} ({len(sizes)} requests)",
        f"- characters per user message: p50 {float(np.percentile(per_message, 50)):.0f}",
        f"- extraction requests per 100 user messages: {100 * requests / messages:.1f} "
        f"(LoCoMo sessions as sittings, one observation = one message; 25 when a user "
        f"sends at least 4 messages per sitting, at most 100 when every message is "
        f"followed by idle_seconds of silence)",
    ]


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    args = parser.parse_args(argv)
    async with bench_env() as env:
        from amrita_plugin_memory.core.config import EnvConfig
        from amrita_plugin_memory.embedding.client import EmbeddingClient

        from .recall_run import STEPS, build_runtime, embedder_env

        embedder = EmbeddingClient.from_env(EnvConfig.load(embedder_env("local", "", "e5")))
        out = ["## Active memory", ""]
        chinese = await _chinese_splits(embedder)
        out += _table("Chinese (project generator, paraphrase questions)", chinese)
        out += ["", _choice("messages with CJK (recall_min_similarity)", chinese), ""]
        if args.data.exists():
            convs = _locomo(args.data)
            locomo = await _locomo_splits(embedder, convs)
            out += _table("LoCoMo (evidence observations)", locomo)
            out += ["", _choice("other messages (recall_min_similarity_non_cjk)", locomo), ""]
            rt = build_runtime(env.work / "active", STEPS[-1], embedder_env("local", "", "e5"))
            env.runtimes.append(rt)
            out += await _cost(convs, rt)
        else:
            out.append(f"LoCoMo data not found at {args.data}: its rows are left out.")
        await embedder.close()
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
