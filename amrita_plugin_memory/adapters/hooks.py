"""Hook registration in one place: a :class:`HookSet` registers and removes its hooks as a unit.

Active memory, group awareness and the L3 loop each add NoneBot message
matchers and amrita-core pre-completion / completion hooks, and each must be
able to remove them all again (a stopped runner, a test swapping the
runtime). The registration, the duplicate guard and the removal live here, so
a feature's hook module only says *which* hooks at *which* priority call
*which* method.
"""

# No ``from __future__ import annotations``: NoneBot and amrita-sense inject
# handler arguments by their annotation objects, resolved from this module.

from collections.abc import Awaitable, Callable
from typing import Any

from amrita_core import CompletionEvent, PreCompletionEvent
from nonebot.adapters import Bot, Event

__all__ = ["HookSet", "remove_sense_matcher"]

PreHandler = Callable[[PreCompletionEvent], Awaitable[None]]
PostHandler = Callable[[CompletionEvent], Awaitable[Any]]
MessageRule = Callable[[Event], Awaitable[bool]]
MessageHandler = Callable[[Bot, Event], Awaitable[None]]


class HookSet:
    """Hooks registered together and removed together.

    Every hook is registered with ``block=False``: the plugin only adds to a
    turn, it never stops Amrita's chat or another plugin's hook.
    """

    def __init__(self) -> None:
        self._matchers: list[Any] = []
        self._sense_matchers: list[Any] = []

    @property
    def registered(self) -> bool:
        """Whether any hook is live (a second :meth:`register` of a feature is a no-op)."""
        return bool(self._matchers or self._sense_matchers)

    def on_message(self, rule: MessageRule, handler: MessageHandler, *, priority: int) -> None:
        """A NoneBot message matcher that never blocks: ``handler(bot, event)`` when ``rule``."""
        from nonebot import on_message
        from nonebot.rule import Rule

        matcher = on_message(rule=Rule(rule), priority=priority, block=False)

        async def handle_message(bot: Bot, event: Event) -> None:
            await handler(bot, event)

        matcher.handle()(handle_message)
        self._matchers.append(matcher)

    def on_precompletion(self, handler: PreHandler, *, priority: int) -> None:
        """An amrita-core pre-completion hook (before the model is called)."""
        from amrita_core import on_precompletion

        matcher = on_precompletion(priority=priority, block=False)

        async def before_completion(event: PreCompletionEvent) -> None:
            await handler(event)

        matcher.handle()(before_completion)
        self._sense_matchers.append(matcher)

    def on_completion(self, handler: PostHandler, *, priority: int) -> None:
        """An amrita-core completion hook (after the model answered)."""
        from amrita_core import on_completion

        matcher = on_completion(priority=priority, block=False)

        async def after_completion(event: CompletionEvent) -> None:
            await handler(event)

        matcher.handle()(after_completion)
        self._sense_matchers.append(matcher)

    def remove(self) -> None:
        """Remove every hook of this set now (an event being dispatched is not disturbed)."""
        for matcher in self._matchers:
            matcher.destroy()
        self._matchers = []
        for matcher in self._sense_matchers:
            remove_sense_matcher(matcher)
        self._sense_matchers = []


def remove_sense_matcher(matcher: Any) -> int:
    """Remove the handlers of an amrita-sense ``matcher`` from the global registry now.

    amrita-sense (1.1.x) has no public way to unregister a hook: ``Matcher``
    only registers, and drops a handler lazily, at the next event, once its
    ``dead_at`` passed (set only in the constructor, which ``on_precompletion``
    does not expose). So this is the one place that edits the registry's
    handler table, ``EventRegistry().get_handlers(event_type)`` →
    ``{priority: [FunctionData(matcher=…)]}``; ``tests/test_l3_delivery.py``
    fails loudly when that shape changes. The priority's list is replaced, not
    edited in place, so an event being dispatched over it right now is not
    disturbed. Returns the number of handlers removed.
    """
    from amrita_sense import EventRegistry

    handlers = EventRegistry().get_handlers(matcher.event_type)
    current = list(handlers.get(matcher.priority, []))
    kept = [h for h in current if h.matcher is not matcher]
    handlers[matcher.priority] = kept
    return len(current) - len(kept)
