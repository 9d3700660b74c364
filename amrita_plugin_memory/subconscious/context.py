"""What the loop's tool groups may know about the loop: a small protocol, not the runner."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from ..core.calendar import OwnerCalendar
from .types import Cycle, StateData

__all__ = ["LoopContext", "count_action"]

T = TypeVar("T")


class LoopContext(Protocol):
    """The running loop as a tool group sees it (implemented by the runner).

    Groups get the services they work on (stores, the memory tools, the
    messenger) explicitly in their constructors; through this protocol they
    reach only the cycle that is running, the state and its one mutator, and
    the guide templates for their prompt sections.
    """

    @property
    def current_cycle(self) -> Cycle | None: ...

    @property
    def calendar(self) -> OwnerCalendar:
        """The owner's calendar (the runtime's): the loop's "now" and shown times."""
        ...

    @property
    def state(self) -> StateData: ...

    async def mutate_state(
        self, change: Callable[[StateData], T], *, since: float | None = None
    ) -> T: ...

    async def may_act(self) -> bool:
        """Whether the running cycle may still act (its target user not forgotten since)."""
        ...

    def render_guide(self, key: str) -> str: ...


def count_action(ctx: LoopContext, action: str) -> None:
    """Record a successful state-changing call in the running cycle (for its abstract)."""
    cycle = ctx.current_cycle
    if cycle is not None:
        cycle.actions[action] += 1
