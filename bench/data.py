"""Synthetic memories: partitions, documents, metadata and their vectors.

The vectors are exactly what the benchmark's embedding server returns for the
documents (``tests.servers.embed_text``, 384 dimensions), computed in-process
once, so collections can be filled with precomputed vectors through raw
ChromaDB and a re-embedding produces the same vectors again.

Layout (full scale): 100 partitions and 100,000 memories in all — partition 0
holds 10,000 ("big"), partition 1 holds 1,000 ("mid"), partition 2 holds 100
("small") and the 97 others share the rest. Memories are inserted in stages
(mid; then small and big; then the rest) so that the cost of Chroma's ``where``
filter can be measured at three collection sizes while the data is loaded.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tests.servers import embed_text

from .harness import DIM

__all__ = ["Dataset", "Scale", "make_dataset", "memory_metadata"]

_TOPICS = (
    "喜欢喝冰美式，不加糖",
    "周末常去西山爬山，最远走过二十公里",
    "正在学习 Rust，卡在生命周期标注",
    "养了一只叫团子的橘猫，三岁",
    "对花生过敏，点外卖要备注",
    "在准备十月份的马拉松，目标四小时以内",
    "工作是前端开发，主要用 TypeScript 和 Vue",
    "最近在读《百年孤独》，读到第十二章",
    "下个月要搬家到杭州滨江",
    "喜欢听后摇，最爱 Mono 和 MONO 的现场",
    "家里有两个孩子，老大上三年级",
    "玩原神，主力角色是钟离和胡桃",
    "prefers dark mode and vim keybindings everywhere",
    "is allergic to penicillin; mention it when talking about doctors",
    "plays the piano, currently practising Chopin's nocturne op. 9 no. 2",
    "wants short answers in the morning and longer explanations at night",
)
_IMPORTANCE = ("low", "medium", "high")


@dataclass(frozen=True, slots=True)
class Scale:
    """Sizes of one benchmark run."""

    name: str
    partitions: int
    big: int
    mid: int
    small: int
    total: int
    batch: int = 64  # REEMBED_BATCH_SIZE (the spec's default)
    reps: int = 50  # timed repetitions of a latency measurement
    write_reps: int = 60  # timed single writes per side (item 3)
    embed_probe: int = 6_400  # items embedded to measure the server's batch throughput
    concurrent_reads: int = 50  # item 7

    @property
    def rest(self) -> int:
        return self.total - self.big - self.mid - self.small


FULL = Scale("full", partitions=100, big=10_000, mid=1_000, small=100, total=100_000)
QUICK = Scale(
    "quick",
    partitions=10,
    big=1_000,
    mid=200,
    small=20,
    total=2_000,
    reps=15,
    write_reps=15,
    embed_probe=640,
)


def memory_metadata(partition: str, importance: str, stamp: str, tags: str) -> dict[str, Any]:
    """The metadata our ``MemoryRecord.to_metadata`` writes."""
    return {
        "user_id": partition,
        "scope": "user",
        "tags": tags,
        "importance": importance,
        "created_at": stamp,
        "updated_at": stamp,
    }


@dataclass
class Dataset:
    """All memories of a run, in insertion order, with their vectors."""

    scale: Scale
    keys: list[str]  # partition keys (uni_ids), index 0 = big, 1 = mid, 2 = small
    ids: list[str]
    docs: list[str]
    metas: list[dict[str, Any]]
    owner: np.ndarray  # partition index of every memory
    vectors: np.ndarray  # float32, (n, DIM)
    stages: list[int] = field(default_factory=list)  # cumulative counts after each stage
    seconds: float = 0.0  # time spent computing the vectors

    @property
    def big(self) -> str:
        return self.keys[0]

    @property
    def mid(self) -> str:
        return self.keys[1]

    @property
    def small(self) -> str:
        return self.keys[2]

    def indices(self, partition: str) -> np.ndarray:
        return np.flatnonzero(self.owner == self.keys.index(partition))

    def size(self, partition: str) -> int:
        return int(np.count_nonzero(self.owner == self.keys.index(partition)))

    def batches(self, start: int, stop: int, size: int) -> Sequence[tuple[int, int]]:
        return [(s, min(s + size, stop)) for s in range(start, stop, size)]


def _sizes(scale: Scale) -> list[int]:
    others = scale.partitions - 3
    base, extra = divmod(scale.rest, others)
    return [scale.big, scale.mid, scale.small] + [
        base + (1 if i < extra else 0) for i in range(others)
    ]


def make_dataset(scale: Scale, key_of: Callable[[int], str], *, seed: int = 7) -> Dataset:
    """Generate the memories of ``scale``; ``key_of(i)`` is the key of partition ``i``."""
    rng = random.Random(seed)
    sizes = _sizes(scale)
    keys = [key_of(i) for i in range(scale.partitions)]
    # Insertion order: stage 1 = mid, stage 2 = small + big, stage 3 = the others.
    order: list[int] = [1] * sizes[1]
    stages = [len(order)]
    order += [2] * sizes[2] + [0] * sizes[0]
    stages.append(len(order))
    rest = [p for p in range(3, scale.partitions) for _ in range(sizes[p])]
    rng.shuffle(rest)
    order += rest
    stages.append(len(order))

    ids: list[str] = []
    docs: list[str] = []
    metas: list[dict[str, Any]] = []
    for n, p in enumerate(order):
        ids.append(f"{rng.getrandbits(128):032x}")
        topic = _TOPICS[rng.randrange(len(_TOPICS))]
        docs.append(f"记忆#{n}：用户 {p} 说过，{topic}（第 {rng.randrange(1000)} 次提到）")
        day = 1 + n % 28
        stamp = f"2025-{1 + n % 12:02d}-{day:02d}T12:00:00+00:00"
        tags = f'["话题{rng.randrange(20)}", "来源{rng.randrange(3)}"]'
        metas.append(memory_metadata(keys[p], _IMPORTANCE[n % 3], stamp, tags))
    started = time.perf_counter()
    vectors = np.empty((len(docs), DIM), dtype=np.float32)
    for i, doc in enumerate(docs):
        vectors[i] = embed_text(doc, DIM)
    return Dataset(
        scale=scale,
        keys=keys,
        ids=ids,
        docs=docs,
        metas=metas,
        owner=np.asarray(order, dtype=np.int32),
        vectors=vectors,
        stages=stages,
        seconds=time.perf_counter() - started,
    )
