"""The owner's calendar: local days of absolute stamps, shown dates, the ``[memory] timezone`` key.

A stamp at 23:30 UTC is the next day in Beijing; a zone the database does not
know is a clear error naming the key; an empty key follows the machine's zone
(its real rules, DST included).
"""

from __future__ import annotations

import os
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.lazy import lazy_import

K = lazy_import("amrita_plugin_memory.core.calendar")
C = lazy_import("amrita_plugin_memory.core.config")


def _at(stamp: str) -> Any:
    return lambda: datetime.fromisoformat(stamp)


def test_local_days_and_shown_dates_follow_the_owners_zone() -> None:
    cal = K.OwnerCalendar(K.zone_named("Asia/Shanghai"), _at("2026-12-03T23:30:00+00:00"))
    assert cal.name == "Asia/Shanghai"
    assert cal.today() == date(2026, 12, 4)  # 07:30 in Beijing
    assert cal.day_of("2026-12-03T23:30:00+00:00") == date(2026, 12, 4)
    assert cal.day_of("2026-12-03T15:59:59") == date(2026, 12, 3)  # naive = UTC
    assert cal.day_of("2026-12-03T16:00:00+00:00") == date(2026, 12, 4)
    assert cal.show_date("2026-12-03T23:30:00Z") == "2026-12-04"
    assert cal.show_day("2026-12-03T23:30:00Z") == "2026-12-04 周五"
    assert cal.show_time("2026-12-03T23:30:00Z") == "2026-12-04 07:30"
    assert cal.day_of(datetime(2026, 12, 3, 23, 30, tzinfo=UTC).timestamp()) == date(2026, 12, 4)
    assert cal.show_date("not a time") == "" and cal.day_of(None) is None
    assert cal.start_of(date(2026, 12, 4)).isoformat() == "2026-12-04T00:00:00+08:00"
    assert cal.next_midnight().isoformat() == "2026-12-05T00:00:00+08:00"
    assert cal.week_of(date(2026, 12, 6)) == (date(2026, 11, 30), date(2026, 12, 6))  # a Sunday


def test_an_unknown_zone_is_an_error_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[memory]\ntimezone = "Mars/Olympus"\n', encoding="utf-8")
    with pytest.raises(C.ConfigError, match=r"memory\.timezone.*Mars/Olympus"):
        C.load_config_file(path, warn=lambda _: None)
    with pytest.raises(ValueError):
        K.zone_named("../etc/passwd")
    zone = C.ConfigFile.model_validate({"memory": {"timezone": " Asia/Shanghai "}})
    assert zone.memory.timezone == "Asia/Shanghai"
    assert C.ConfigFile().memory.timezone == ""
    assert "[memory]" in C.render_config_toml()


@pytest.mark.skipif(not hasattr(time, "tzset"), reason="needs time.tzset")
def test_the_machine_zone_keeps_its_dst_rules() -> None:
    old = os.environ.get("TZ")
    os.environ["TZ"] = "America/New_York"
    time.tzset()
    try:
        cal = K.OwnerCalendar(K.MachineZone(), _at("2026-07-01T12:00:00+00:00"))
        assert cal.local("2026-07-01T12:00:00Z").utcoffset() == timedelta(hours=-4)
        assert cal.local("2026-01-01T12:00:00Z").utcoffset() == timedelta(hours=-5)
        assert cal.start_of(date(2026, 3, 8)).utcoffset() == timedelta(hours=-5)
        assert cal.start_of(date(2026, 3, 9)).utcoffset() == timedelta(hours=-4)
        assert cal.day_of("2026-07-01T03:59:00Z") == date(2026, 6, 30)
        assert cal.name == "local (UTC-04:00)"
    finally:
        if old is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = old
        time.tzset()
