"""Timing statistics, probes (event-loop lag, peak RSS) and the result table."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "GcProbe",
    "LoopLagProbe",
    "PeakRss",
    "Row",
    "Summary",
    "format_table",
    "load_average",
]


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile of already sorted values (q in 0..100)."""
    if not sorted_values:
        return math.nan
    pos = (len(sorted_values) - 1) * q / 100
    low = math.floor(pos)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (pos - low)


@dataclass(frozen=True, slots=True)
class Summary:
    """Latencies in seconds."""

    values: tuple[float, ...]

    @classmethod
    def of(cls, values: Sequence[float]) -> Summary:
        return cls(tuple(sorted(values)))

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def p50(self) -> float:
        return _percentile(self.values, 50)

    @property
    def p95(self) -> float:
        return _percentile(self.values, 95)

    @property
    def mean(self) -> float:
        return sum(self.values) / len(self.values) if self.values else math.nan

    @property
    def max(self) -> float:
        return self.values[-1] if self.values else math.nan

    def ms(self) -> str:
        return f"p50 {fmt_ms(self.p50)} p95 {fmt_ms(self.p95)}"


def fmt_ms(seconds: float) -> str:
    """Milliseconds with a precision that suits the magnitude."""
    if math.isnan(seconds):
        return "-"
    ms = seconds * 1000
    if ms < 1:
        return f"{ms:.3f} ms"
    if ms < 100:
        return f"{ms:.2f} ms"
    return f"{ms:.0f} ms"


# ---------------------------------------------------------------------------
# Probes
# ---------------------------------------------------------------------------


class LoopLagProbe:
    """A 10 ms ticker on the event loop recording how late every tick wakes up.

    The lag of a tick is ``actual interval - 10 ms``: the time the loop was
    busy (or blocked) when the ticker should have run.
    """

    def __init__(self, interval: float = 0.010) -> None:
        self.interval = interval
        self.lags: list[float] = []
        self.worst: tuple[float, float] = (0.0, 0.0)  # (lag, perf_counter when it ended)
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(self.interval)
            now = time.perf_counter()
            lag = max(0.0, now - last - self.interval)
            self.lags.append(lag)
            if lag > self.worst[0]:
                self.worst = (lag, now)
            last = now

    def start(self) -> None:
        self.lags.clear()
        self.worst = (0.0, 0.0)
        self._task = asyncio.get_running_loop().create_task(self._tick())

    async def stop(self) -> Summary:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        return Summary.of(self.lags)


class GcProbe:
    """Durations of the garbage collector's passes over a block (``gc.callbacks``).

    A full (generation 2) pass runs on the thread that allocates — often the
    event loop — and stops it for as long as it takes to scan every tracked
    object, so it is a possible cause of loop lag.
    """

    def __init__(self) -> None:
        self.pauses: list[tuple[int, float, float]] = []  # (generation, seconds, end)
        self._started = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        now = time.perf_counter()
        if phase == "start":
            self._started = now
        else:
            self.pauses.append((info["generation"], now - self._started, now))

    def start(self) -> None:
        self.pauses.clear()
        gc.callbacks.append(self._callback)

    def stop(self) -> float:
        """Stop recording; the longest pass, in seconds."""
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(self._callback)
        return self.longest

    @property
    def longest(self) -> float:
        return max((d for _, d, _ in self.pauses), default=0.0)


def _status_kb(field_name: str, pid: int | str = "self") -> int:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0  # the process is gone
    match = re.search(rf"^{field_name}:\s+(\d+) kB", text, re.MULTILINE)
    return int(match.group(1)) if match else 0


class PeakRss:
    """Peak resident memory growth of a process over a block (Linux ``VmHWM``): this
    one by default, or another (the child ``chroma run`` of local mode) by ``pid``.

    ``/proc/<pid>/clear_refs`` (value 5) resets the high-water mark to the
    current RSS, so the peak is exact, not sampled.
    """

    def __init__(self, pid: int | None = None) -> None:
        self.pid: int | str = "self" if pid is None else pid
        self.before_kb = 0
        self.peak_kb = 0
        self.exact = True

    def start(self) -> None:
        try:
            Path(f"/proc/{self.pid}/clear_refs").write_text("5")
        except OSError:
            self.exact = False  # the peak then includes earlier history
        self.before_kb = _status_kb("VmRSS", self.pid)

    def stop(self) -> float:
        """Growth of the peak over the starting RSS, in MiB (0 if it did not grow)."""
        self.peak_kb = _status_kb("VmHWM", self.pid)
        return max(0.0, (self.peak_kb - self.before_kb) / 1024)


def load_average() -> str:
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return "load average: unknown"
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


# ---------------------------------------------------------------------------
# Table
# ---------------------------------------------------------------------------


@dataclass
class Row:
    """One line of the result table."""

    item: str
    mode: str
    what: str
    p50: str = ""
    p95: str = ""
    value: str = ""
    target: str = ""
    verdict: str = "INFO"  # PASS / FAIL / INFO / SKIP
    notes: list[str] = field(default_factory=list)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def format_table(rows: Sequence[Row]) -> str:
    headers = ("#", "mode", "measurement", "p50", "p95", "ratio / value", "target", "verdict")
    cells = [(r.item, r.mode, r.what, r.p50, r.p95, r.value, r.target, r.verdict) for r in rows]
    widths = [max(_width(h), *(_width(c[i]) for c in cells)) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        return " | ".join(_pad(v, w) for v, w in zip(values, widths, strict=True))

    out = [line(headers), "-+-".join("-" * w for w in widths)]
    out += [line(c) for c in cells]
    return "\n".join(out)


def _width(text: str) -> int:
    # East Asian wide characters take two columns in a terminal.
    return sum(2 if ord(ch) > 0x2E7F else 1 for ch in text)


def _pad(text: str, width: int) -> str:
    return text + " " * (width - _width(text))
