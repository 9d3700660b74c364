"""Group awareness (issue 13): window ingest and block building, in a real NoneBot process.

    uv run --frozen python -m bench.group_bench            # 5 s of ingest, 2,000 block builds
    uv run --frozen python -m bench.group_bench --quick    # 1 s, 300 builds

G1 — ingest: OneBot V11 group messages at 1,000 per second (50 groups, 500
members) through the observer's handler (:meth:`GroupHooks.observe_event`,
the whole of what the plugin adds to each message), while the window writes
it starts run on the same event loop against SQLite. Target: handler time
p99 ≤ 1 ms, the offered rate sustained, and every message persisted
(checked after the shutdown flush).

G2 — blocks: ``<GROUP_CONTEXT>`` + ``<PERSONAS>`` of one turn in a group of
500 members that all have a label and a persona of five fields, a full window
of 100 messages and 20 messages of chat history to compare against
(:meth:`GroupAwareness.turn_blocks`, caches warm as in a running bot).
Target: p95 ≤ 2 ms. The first build of a fresh process (cold caches, rows
read from SQLite) is shown for information.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import sys
import time
from typing import Any

from .harness import bench_env
from .stats import Row, Summary, fmt_ms, format_table, verdict

INGEST_RATE = 1000  # messages per second
INGEST_P99 = 0.001  # s
BLOCKS_P95 = 0.002  # s
MEMBERS = 500
GROUPS = 50


def _event(user_id: int, group_id: int, text: str, message_id: int) -> Any:
    from nonebot.adapters.onebot.v11 import GroupMessageEvent, Message

    return GroupMessageEvent.model_validate(
        {
            "time": int(time.time()),
            "self_id": 12345,
            "post_type": "message",
            "sub_type": "normal",
            "user_id": user_id,
            "group_id": group_id,
            "message_type": "group",
            "message_id": message_id,
            "message": Message(text),
            "original_message": Message(text),
            "raw_message": text,
            "font": 0,
            "sender": {
                "user_id": user_id,
                "nickname": f"昵称{user_id}",
                "card": "",
                "role": "member",
            },
            "to_me": False,
        }
    )


def _config(**group_context: Any) -> Any:
    from amrita_plugin_memory.core.config import ConfigFile

    base = ConfigFile()
    return base.model_copy(
        update={
            "group_context": base.group_context.model_copy(
                update={"enabled": True, **group_context}
            ),
            "persona": base.persona.model_copy(update={"enabled": True}),
        }
    )


async def bench_ingest(rows: list[Row], seconds: float) -> None:
    from nonebot_plugin_orm import get_session
    from sqlalchemy import func, select

    from amrita_plugin_memory.adapters.group_hooks import GroupHooks
    from amrita_plugin_memory.groups.service import GroupAwareness
    from amrita_plugin_memory.storage.models import GroupMessage

    rng = random.Random(13)
    awareness = GroupAwareness.build(_config())
    hooks = GroupHooks(awareness, {"/"})  # not registered: the handler is called directly
    total = int(seconds * INGEST_RATE)
    ids = itertools.count(1)
    events = [
        _event(
            200_000 + rng.randrange(MEMBERS),
            900_000 + rng.randrange(GROUPS),
            "群聊消息 " + "内容" * rng.randrange(1, 40),
            next(ids),
        )
        for _ in range(total)
    ]
    handler: list[float] = []
    started = time.perf_counter()
    for i, event in enumerate(events):
        due = started + i / INGEST_RATE
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        elif i % 50 == 0:
            await asyncio.sleep(0)  # behind schedule: still let the writes run
        t0 = time.perf_counter()
        hooks.observe_event(event)
        handler.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - started
    await awareness.close()  # the shutdown flush
    async with get_session() as session:
        stored = await session.scalar(select(func.count()).select_from(GroupMessage)) or 0
    expected = sum(min(n, 100) for n in _per_group(events).values())
    summary = Summary.of(handler)
    p99 = summary.values[int(0.99 * (summary.n - 1))]
    rate = total / elapsed
    rows.append(
        Row(
            "G1",
            "sqlite",
            f"observer handler, {total:,} group messages at {INGEST_RATE:,}/s",
            p50=fmt_ms(summary.p50),
            p95=fmt_ms(summary.p95),
            value=f"p99 {fmt_ms(p99)}, max {fmt_ms(summary.max)}; {rate:,.0f} msg/s; "
            f"{stored:,}/{expected:,} rows kept",
            target="p99 ≤ 1 ms at 1,000/s",
            verdict=verdict(
                p99 <= INGEST_P99 and rate >= INGEST_RATE * 0.97 and stored == expected
            ),
        )
    )


def _per_group(events: list[Any]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for event in events:
        counts[event.group_id] = counts.get(event.group_id, 0) + 1
    return counts


async def bench_blocks(rows: list[Row], reps: int) -> None:
    from amrita_plugin_memory.groups.service import GroupAwareness
    from amrita_plugin_memory.prompting.group_blocks import SeenInRequest
    from amrita_plugin_memory.storage.keys import target_from_ids
    from amrita_plugin_memory.storage.scope import ScopeRules

    rng = random.Random(7)
    config = _config()
    gid = "777001"
    members = [str(300_000 + i) for i in range(MEMBERS)]
    setup = GroupAwareness.build(config)
    await setup.stores.directory.labels(gid, members)
    fields = ["职业/身份", "兴趣", "说话风格", "关注领域", "最近提到"]
    for uid in members:
        updates = [(f, f"{f}的内容，大约二十个字的描述{uid[-3:]}") for f in fields]
        await setup.stores.personas.merge(uid, updates, now=1.0, max_chars=700)
    for i in range(100):
        uid = rng.choice(members)
        setup.observe(gid, uid, f"昵称{uid}", f"第{i}条：" + "聊天内容" * rng.randrange(1, 30))
    await setup.close()
    history_user = [
        f"[普通成员][2026-01-01 10:00][昵称{rng.choice(members)}（{rng.choice(members)}）]说:"
        + "历史消息" * 30
        for _ in range(10)
    ]
    history_bot = ["机器人的历史回复" * 20 for _ in range(10)]

    awareness = GroupAwareness.build(config)  # a fresh process: cold caches
    t0 = time.perf_counter()
    view = ScopeRules().of_turn(target_from_ids(members[0], gid)).group_view()
    await awareness.turn_blocks(view, members[0], "昵称", SeenInRequest(history_user, history_bot))
    cold = time.perf_counter() - t0
    # A running bot has seen its active members: their labels and personas are cached.
    await awareness.stores.directory.labels(gid, members)
    await awareness.stores.personas.of_users_anywhere(members)
    times: list[float] = []
    size = 0
    for _ in range(reps):
        speaker = rng.choice(members)
        t0 = time.perf_counter()
        seen = SeenInRequest(history_user, history_bot)
        blocks = await awareness.turn_blocks(view, speaker, "昵称", seen)
        times.append(time.perf_counter() - t0)
        size = sum(len(b) for b in blocks)
    summary = Summary.of(times)
    rows.append(
        Row(
            "G2",
            "sqlite",
            f"<GROUP_CONTEXT> + <PERSONAS>, {MEMBERS}-member group ({reps:,} turns)",
            p50=fmt_ms(summary.p50),
            p95=fmt_ms(summary.p95),
            value=f"first build {fmt_ms(cold)} (cold); blocks {size:,} chars",
            target="p95 ≤ 2 ms",
            verdict=verdict(summary.p95 <= BLOCKS_P95),
        )
    )


async def run(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.group_bench")
    parser.add_argument("--quick", action="store_true", help="1 s of ingest, 300 block builds")
    args = parser.parse_args(argv)
    rows: list[Row] = []
    async with bench_env():
        await bench_ingest(rows, 1.0 if args.quick else 5.0)
        await bench_blocks(rows, 300 if args.quick else 2000)
    print()
    print("amrita_plugin_memory — group awareness benchmarks (issue 13)")
    print(format_table(rows))
    return 1 if any(r.verdict == "FAIL" for r in rows) else 0


def main() -> None:
    sys.exit(asyncio.run(run()))


if __name__ == "__main__":
    main()
