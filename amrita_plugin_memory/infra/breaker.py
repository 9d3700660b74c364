"""A circuit breaker: stop calling a service that keeps failing, try again later by itself.

Used where a failing dependency must not cost every chat turn its full
timeout (recall's query embedding) or turn failures into a storm of retries
(extraction requests to the chat model). After ``threshold`` failures in a
row the breaker opens: :meth:`CircuitBreaker.allow` answers ``False`` for
``cooldown`` seconds, doubling with every failed trial up to
``max_cooldown``. When the cooldown is over one call is let through (a
trial); its success closes the breaker, its failure opens it again.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["CircuitBreaker"]


class CircuitBreaker:
    """Closed (calls go through), open (calls skipped until a deadline), or on trial."""

    def __init__(
        self,
        *,
        threshold: int = 3,
        cooldown: float = 5.0,
        max_cooldown: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.threshold = max(1, threshold)
        self.cooldown = cooldown
        self.max_cooldown = max(cooldown, max_cooldown)
        self.clock = clock
        self.failures = 0
        """Failures in a row."""
        self._open_until = 0.0
        self._current_cooldown = cooldown
        self._trial = False

    @property
    def is_open(self) -> bool:
        return self.failures >= self.threshold

    def allow(self) -> bool:
        """Whether to make the call now (``False`` while open; one trial after the cooldown)."""
        if not self.is_open:
            return True
        if self._trial or self.clock() < self._open_until:
            return False
        self._trial = True
        return True

    def retry_in(self) -> float:
        """Seconds until the next trial (0 when closed or due)."""
        if not self.is_open:
            return 0.0
        return max(0.0, self._open_until - self.clock())

    def success(self) -> None:
        self.failures = 0
        self._trial = False
        self._current_cooldown = self.cooldown

    def failure(self) -> None:
        was_trial = self._trial
        self._trial = False
        self.failures += 1
        if not self.is_open:
            return
        if was_trial:
            self._current_cooldown = min(self._current_cooldown * 2, self.max_cooldown)
        self._open_until = self.clock() + self._current_cooldown
