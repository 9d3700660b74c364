"""``usage`` of ``ambot memory status --json``, the admin API's ``/status`` and the console.

``today`` and ``last_30_days`` map each background feature to
``{"requests", "prompt_tokens", "completion_tokens", "cached_tokens"}``;
``estimated`` says how many of those requests were estimated from characters;
``daily`` holds one value per day and feature for the console's chart;
``blocks`` what each injected block adds to chat turns (characters per turn);
``budget`` the caps and who they hold back.
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

from ...core.text import short_error
from .budget import BackgroundBudget
from .ledger import BLOCK_PREFIX, BLOCKS, FEATURES, TURNS
from .spend import Spend

__all__ = ["WINDOW_DAYS", "usage_json", "usage_report"]

WINDOW_DAYS = 30


def _window(today: str, count: int) -> list[str]:
    last = date.fromisoformat(today)
    return [(last - timedelta(days=count - 1 - i)).isoformat() for i in range(count)]


def _sum(days: dict[str, dict[str, Spend]], which: list[str], feature: str) -> Spend:
    total = Spend()
    for day in which:
        total = total + days.get(day, {}).get(feature, Spend())
    return total


def _blocks(days: dict[str, dict[str, Spend]], which: list[str]) -> dict[str, Any]:
    turns = _sum(days, which, TURNS).requests
    out: dict[str, Any] = {"turns": turns}
    for block in BLOCKS:
        spent = _sum(days, which, BLOCK_PREFIX + block)
        out[block] = {
            "turns": spent.requests,
            "chars": spent.chars,
            "chars_per_turn": round(spent.chars / turns) if turns else 0,
        }
    return out


async def usage_json(budget: BackgroundBudget) -> dict[str, Any]:
    """The whole ``usage`` object, read from the ledger of ``budget``."""
    ledger = budget.ledger
    today = ledger.today()
    days = await ledger.totals_by_day(WINDOW_DAYS)
    window = _window(today, WINDOW_DAYS)
    spans = {"today": [today], "last_30_days": window}
    usage: dict[str, Any] = {
        name: {f: _sum(days, span, f).as_json() for f in FEATURES} for name, span in spans.items()
    }
    usage["estimated"] = {
        name: {f: _sum(days, span, f).estimated for f in FEATURES} for name, span in spans.items()
    }
    usage["daily"] = {
        "days": window,
        **{f: [_sum(days, [d], f).tokens for d in window] for f in FEATURES},
    }
    usage["blocks"] = {name: _blocks(days, span) for name, span in spans.items()}
    usage["budget"] = await budget.status_json()
    return usage


async def usage_report(budget: BackgroundBudget) -> dict[str, Any]:
    """:func:`usage_json`, or (the ledger cannot be read) zeros and the reason in ``error``:
    a status report never fails because of it."""
    from ..models import missing_table  # lazily: importable without NoneBot

    try:
        return await usage_json(budget)
    except Exception as exc:
        reason = "数据库中还没有用量表，请执行 ambot orm upgrade" if missing_table(exc) else ""
        zero = {f: Spend().as_json() for f in FEATURES}
        return {
            "today": zero,
            "last_30_days": {f: dict(v) for f, v in zero.items()},
            "error": f"用量记录不可用：{reason or short_error(exc)}",
        }
