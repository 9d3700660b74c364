"""The bounds of active memory's queue, its circuit breaker and its request budget.

The queue is driven with a runner that the test holds (an ``asyncio.Event``):
what is measured is the queue's own bookkeeping, not a model.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tests.helpers import new_memory, runtime


def _queue(runner: Any, **bounds: Any) -> Any:
    from amrita_plugin_memory.active.batches import BatchQueue

    defaults: dict[str, Any] = {"batch_messages": 1, "idle_seconds": 3600}
    return BatchQueue(runner, **(defaults | bounds))


def _key(n: int) -> Any:
    from amrita_plugin_memory.active import BatchKey

    return BatchKey(str(n), f"QQPlatform_Private_{n}", "private")


def _turn(text: str) -> Any:
    from amrita_plugin_memory.active import Turn

    return Turn(text)


async def test_pending_turns_are_capped_and_the_oldest_dropped() -> None:
    from amrita_plugin_memory.active.batches import BatchResult

    seen: list[list[str]] = []

    async def run(batch: Any) -> Any:
        seen.append([t.text for t in batch.turns])
        return BatchResult(ok=True, sent=len(batch.turns))

    queue = _queue(run, batch_messages=100, max_pending=5, max_turns=16)
    for i in range(12):
        queue.add(_key(1), _turn(f"m{i}"))
    assert queue.waiting(_key(1)) == 5 and queue.stats.dropped == 7
    await queue.flush()
    assert seen == [["m7", "m8", "m9", "m10", "m11"]]


async def test_at_most_max_running_extractions_at_once_in_arrival_order() -> None:
    from amrita_plugin_memory.active.batches import BatchResult

    release = asyncio.Event()
    running = 0
    peak = 0
    order: list[str] = []

    async def run(batch: Any) -> Any:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        order.append(batch.key.user_id)
        await release.wait()
        running -= 1
        return BatchResult(ok=True, sent=len(batch.turns))

    queue = _queue(run, max_running=3)
    for n in range(10):
        queue.add(_key(n), _turn("hello"))
    await asyncio.sleep(0.05)
    assert running == 3 and order == ["0", "1", "2"]
    release.set()
    await queue.drain()
    assert peak == 3 and queue.stats.peak_running == 3
    assert order == [str(n) for n in range(10)] and queue.stats.batches == 10


async def test_a_batch_takes_at_most_max_turns_and_what_was_not_sent_goes_next() -> None:
    from amrita_plugin_memory.active.batches import BatchResult

    seen: list[list[str]] = []

    async def run(batch: Any) -> Any:
        seen.append([t.text for t in batch.turns])
        return BatchResult(ok=True, sent=min(2, len(batch.turns)))  # a budget of 2 turns

    queue = _queue(run, batch_messages=100, max_turns=3)
    for i in range(5):
        queue.add(_key(1), _turn(f"m{i}"))
    await queue.flush()
    assert seen == [["m0", "m1", "m2"], ["m2", "m3", "m4"], ["m4"]]
    assert queue.waiting(_key(1)) == 0


async def test_a_voided_batch_never_comes_back_whatever_the_runner_says() -> None:
    from amrita_plugin_memory.active.batches import BatchResult

    started = asyncio.Event()
    release = asyncio.Event()

    async def run(batch: Any) -> Any:
        started.set()
        await release.wait()
        return BatchResult(ok=False, sent=len(batch.turns))  # a failure: normally retried

    queue = _queue(run)
    queue.add(_key(1), _turn("我欠张三五百块"))
    await started.wait()
    queue.forget("1")
    release.set()
    await queue.drain()
    assert queue.waiting(_key(1)) == 0 and queue.pending_of("1") == []


async def test_a_deferred_batch_waits_untouched_and_a_flush_does_not_spin() -> None:
    from amrita_plugin_memory.active.batches import BatchResult

    calls = 0

    async def run(batch: Any) -> Any:
        nonlocal calls
        calls += 1
        return BatchResult(ok=False, sent=0, deferred=True, retry_in=3600)

    queue = _queue(run)
    queue.add(_key(1), _turn("a"))
    async with asyncio.timeout(5):
        await queue.flush()
    assert calls == 1 and queue.waiting(_key(1)) == 1
    assert queue.pending_of("1") == [{"origin": "private", "text": "a", "reply": ""}]
    await queue.close()


def test_the_circuit_breaker_opens_waits_tries_once_and_backs_off() -> None:
    from amrita_plugin_memory.infra.breaker import CircuitBreaker

    now = [0.0]
    breaker = CircuitBreaker(threshold=2, cooldown=10, max_cooldown=25, clock=lambda: now[0])
    breaker.failure()
    assert breaker.allow()  # one failure: still closed
    breaker.failure()
    assert not breaker.allow() and breaker.retry_in() == 10
    now[0] = 10
    assert breaker.allow()  # the trial
    assert not breaker.allow()  # only one trial at a time
    breaker.failure()
    assert breaker.retry_in() == 20  # doubled
    now[0] = 30
    assert breaker.allow()
    breaker.failure()
    assert breaker.retry_in() == 25  # capped
    now[0] = 55
    assert breaker.allow()
    breaker.success()
    assert breaker.allow() and breaker.allow() and not breaker.is_open


async def test_an_extraction_request_stays_within_its_character_budget() -> None:
    from amrita_plugin_memory.active import BatchKey, MemoryExtractor, Turn
    from amrita_plugin_memory.storage.keys import user_key

    uid = 5325001
    store = runtime().store
    for i in range(30):
        await store.add(new_memory(user_key(uid), "user", f"用户的第{i}条记忆：" + "长" * 180))
    extractor = MemoryExtractor(store, memory_limit=1000, related_memories=100, max_ops=8)
    turns = [Turn("很长的消息" * 400, "好的" * 300) for _ in range(40)]
    key = BatchKey(str(uid), user_key(uid), "private")
    messages, related, sent = await extractor.prepare(key, turns, budget=20_000)
    size = sum(len(m["content"]) for m in messages)
    assert size <= 20_000 and 1 <= sent < 40 and related, (size, sent, len(related))
    assert messages[1]["content"].count("用户：") == sent
