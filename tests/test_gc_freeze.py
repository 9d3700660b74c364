"""The plugin freezes the start-up objects, so a full GC pass no longer scans them.

A full collection over a bot's ~350,000 start-up objects stalls the event loop
for about 200 ms (``bench.archive_bench``); after :func:`gc.freeze` the pass
scans only what was created since.
"""

from __future__ import annotations

import gc

from tests.lazy import lazy_import

G = lazy_import("amrita_plugin_memory.adapters.gc_freeze")


def test_start_up_objects_are_frozen_and_later_ones_still_collected() -> None:
    gc.unfreeze()
    try:
        unfrozen = len(gc.get_objects())
        frozen = G.freeze_startup_objects()
        assert frozen > 0 and gc.get_freeze_count() > frozen // 2
        assert len(gc.get_objects()) < unfrozen // 10  # a full pass sees only the rest

        class Node:
            def __init__(self) -> None:
                self.me = self

        Node()  # a reference cycle made after start-up is still garbage-collected
        assert gc.collect() >= 1
    finally:
        gc.unfreeze()  # the rest of the session as it was


def test_the_plugin_registers_the_freeze_as_a_start_up_hook() -> None:
    from nonebot import get_driver

    hooks = get_driver()._lifespan._startup_funcs  # pyright: ignore[reportPrivateUsage]
    assert G.freeze_startup_objects in hooks
