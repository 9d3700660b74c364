"""The stamps the console sends, in the owner's zone (``[memory] timezone``).

Stored stamps are UTC; the page shows the owner's days and hours, whatever the
browser's zone. Every answer of the admin API passes through :func:`local_stamps`
once, at its edge (``adapters/console_http``, and the WebSocket messages of the
jobs), so no operation can forget a stamp: a string under a stamp key (``…_at``,
``time``, ``next_run``, ``last_update``, ``since``) that reads as a moment becomes
that moment in the owner's zone with its offset (``2026-12-04T07:30:00+08:00``),
and the page prints its date and time as written, never re-converting it.

A user's export is the exception: it keeps its UTC stamps (and says the zone of
its local dates, :meth:`..upkeep.users.user_data.UserData.export`).
"""

from __future__ import annotations

from typing import Any

from ..core.calendar import OwnerCalendar

__all__ = ["STAMP_KEYS", "is_stamp_key", "local_stamps"]

STAMP_KEYS = frozenset({"time", "next_run", "last_update", "since"})
"""Stamp keys besides every key ending in ``_at``."""


def is_stamp_key(key: object) -> bool:
    return isinstance(key, str) and (key.endswith("_at") or key in STAMP_KEYS)


def _moment(value: str) -> bool:
    """A date *and* time (``2026-12-03T23:30:00+00:00``); a bare date is a day already."""
    return len(value) > 10 and value[10] in "T "


def local_stamps(value: Any, calendar: OwnerCalendar) -> Any:
    """``value`` (JSON-ready) with every stamp in the owner's zone; other values unchanged."""
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        for key, item in value.items():
            if is_stamp_key(key) and isinstance(item, str) and _moment(item):
                out[key] = calendar.show_stamp(item) or item
            else:
                out[key] = local_stamps(item, calendar)
        return out
    if isinstance(value, list | tuple):
        return [local_stamps(item, calendar) for item in value]
    return value
