"""A write gate: maintenance that replaces a collection first stops the writes to it.

A re-embedding or a restore running inside the bot copies the memory
collection into a new one and swaps them; a memory written meanwhile would
land in the old collection and be lost with it. :class:`WriteGate` lets the
store's writes (:meth:`WriteGate.writing`) run concurrently as usual, and
lets maintenance (:meth:`WriteGate.closed`) refuse new writes, wait for the
running ones, and reopen when it is done. A refused write fails at once
with a clear message instead of waiting minutes for the maintenance.

This is the in-process complement of the collection markers a remap sets
(``storage/chroma/remap_markers.py``), which other processes see: the gate closes at once and
for the whole operation (its backup included), with the operation's name.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from ..core.errors import MaintenanceInProgress

__all__ = ["MaintenanceInProgress", "WriteGate"]


class WriteGate:
    """Concurrent writers, or one maintenance operation with no writer running."""

    def __init__(self) -> None:
        self._writers = 0
        self._reason: str | None = None
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def closed_for(self) -> str | None:
        """What the gate is closed for (``None`` when writes are allowed)."""
        return self._reason

    @contextlib.asynccontextmanager
    async def writing(self) -> AsyncIterator[None]:
        """Hold the gate open for one write; refused while maintenance runs."""
        if self._reason is not None:
            raise MaintenanceInProgress(
                f"记忆库正在{self._reason}，暂时不能修改记忆，本次操作未执行；请稍后再试"
            )
        self._writers += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._writers -= 1
            if self._writers == 0:
                self._idle.set()

    @contextlib.asynccontextmanager
    async def closed(self, reason: str) -> AsyncIterator[None]:
        """Refuse new writes, wait for the running ones, run the block, reopen."""
        if self._reason is not None:
            raise MaintenanceInProgress(f"记忆库正在{self._reason}")
        self._reason = reason
        try:
            await self._idle.wait()
            yield
        finally:
            self._reason = None
