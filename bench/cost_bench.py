"""What memory costs the bot owner per turn: the provider's prompt cache, the characters
each block adds, the background requests.

    uv run --frozen python -m bench.cost_bench [--messages 318] [--group 60]

The same bot (real NoneBot + OneBot V11 + Amrita chat, the same scripted model)
answers the same public LoCoMo messages twice, each time in a process of its
own (:mod:`bench.cost_replay`): without this plugin (``plain``) and with it at
its default configuration (``memory``: active memory on; group awareness on for
the group chat; every user has a memo). Printed, per variant:

- the **unchanged prefix share** per request kind (tool-calling, final answer):
  the share of a request that equals the start of the previous request of the
  same kind in the same chat, i.e. what a provider can bill as cached input;
  for every request and for those with at least 10 earlier turns;
- the **characters added per turn** by block (tools, memo, the section after
  the user's message: lead line, ``<MEMORIES>``, ``<GROUP_CONTEXT>``,
  ``<PERSONAS>``), and how many turns showed memories;
- **extraction** (active memory), **persona** (group awareness) and **episode**
  (conversation summaries, each chat's conversation closed at the end) requests:
  characters and estimated tokens per user message;
- **requests per 100 messages** by kind.

See :mod:`bench.cost_metrics` for the definitions; the figures are in
docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from .cost_replay import DEFAULT_DATA

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = ("plain", "memory")


def _run(variant: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    command = [
        sys.executable,
        "-m",
        "bench.cost_replay",
        "--variant",
        variant,
        "--out",
        str(out),
        "--data",
        str(args.data),
        "--messages",
        str(args.messages),
        "--group",
        str(args.group),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run(command, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text(encoding="utf-8"))


def _num(stats: dict[str, float], key: str, digits: int = 0) -> str:
    return f"{stats[key]:.{digits}f}" if stats.get("n") else "–"


def report(figures: dict[str, dict[str, Any]]) -> list[str]:
    out = ["## Cost per turn (LoCoMo messages replayed through a real bot)", ""]
    first = next(iter(figures.values()))["messages"]
    out.append(
        f"{first['private']} private messages (each speaker a user), "
        f"{first['group']} group messages (one in four addressed to the bot); "
        "every private message and every addressed group message is a turn."
    )
    out += ["", "### Unchanged prefix share (what the provider can serve from its cache)", ""]
    out += ["| variant | kind | requests | mean | p10 | with ≥10 earlier turns: n | mean | p10 |"]
    out += ["|---|---|---|---|---|---|---|---|"]
    for variant, fig in figures.items():
        for kind in ("tool-calling", "final"):
            share = fig["prefix_share"].get(kind)
            if not share:
                continue
            a, h = share["all"], share["history>=10"]
            out.append(
                f"| {variant} | {kind} | {a.get('n', 0)} | {_num(a, 'mean', 3)} | "
                f"{_num(a, 'p10', 3)} | {h.get('n', 0)} | {_num(h, 'mean', 3)} | {_num(h, 'p10', 3)} |"
            )
    out += ["", "### Request size (characters as sent: tools + messages, JSON)", ""]
    out += ["| variant | kind | p50 | p90 |", "|---|---|---|---|"]
    for variant, fig in figures.items():
        for kind, stats in fig["request_chars"].items():
            out.append(f"| {variant} | {kind} | {_num(stats, 'p50')} | {_num(stats, 'p90')} |")
    memory = figures.get("memory")
    if memory:
        blocks = memory["blocks_per_turn"]
        out += ["", "### Characters the plugin adds to every turn (first tool-calling request)", ""]
        out += ["| block | turns | mean | p50 | p90 |", "|---|---|---|---|---|"]
        for name, stats in blocks.items():
            out.append(
                f"| {name} | {stats.get('n', 0)} | {_num(stats, 'mean')} | "
                f"{_num(stats, 'p50')} | {_num(stats, 'p90')} |"
            )
        out.append(f"\nTurns that showed `<MEMORIES>`: {memory['turns_with_memories']}")
        out += ["", "### Background requests", ""]
        out.append(
            "Per message: extraction per answered message (what it learns from), "
            "persona per group message (every one is observed), episode per message "
            "(each chat's conversation closed at the end). Tokens: estimated with "
            "the XLM-R tokenizer of the bundled multilingual-e5-small."
        )
        out.append("")
        out += [
            "| kind | requests | chars per request p50 | chars per message | tokens per message |"
        ]
        out += ["|---|---|---|---|---|"]
        for kind, b in memory["background"].items():
            out.append(
                f"| {kind} | {b['requests']} | {_num(b['chars_per_request'], 'p50')} | "
                f"{b['chars_per_message']:.0f} | {b['tokens_per_message']:.0f} |"
            )
    out += ["", "### Requests per 100 messages", ""]
    kinds = sorted({k for fig in figures.values() for k in fig["requests_per_100_messages"]})
    out += ["| variant | " + " | ".join(kinds) + " |", "|---|" + "---|" * len(kinds)]
    for variant, fig in figures.items():
        per = fig["requests_per_100_messages"]
        out.append(f"| {variant} | " + " | ".join(f"{per.get(k, 0):.1f}" for k in kinds) + " |")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--messages", type=int, default=318, help="private messages replayed")
    parser.add_argument("--group", type=int, default=60, help="group messages replayed")
    parser.add_argument("--variant", choices=VARIANTS, action="append", help="run only these")
    args = parser.parse_args(argv)
    if not args.data.exists():
        print(f"LoCoMo data not found at {args.data}", file=sys.stderr)
        return 2
    figures: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="apm-cost-") as tmp:
        for variant in args.variant or VARIANTS:
            figures[variant] = _run(variant, args, Path(tmp) / f"{variant}.json")
    print("\n".join(report(figures)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
