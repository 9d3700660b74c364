"""A second OS process on one store (``tests/test_coherence.py``).

It loads the plugin headless (``nonebot.init`` + ``load_plugin``, the same
runtime a bot builds, remote mode: change feed and leases on) with the init
arguments given as JSON in ``argv[1]``, then answers one JSON command per
stdin line with one JSON line on stdout:

* ``{"op": "add", "partition": …, "text": …, "limit": …}`` → ``{"id": …}`` or ``{"error": …}``;
* ``{"op": "memo", "key": …, "poll": bool}`` → ``{"text": …}`` (the runtime's memo
  service, its cache used; ``poll``: the feed is polled first);
* ``{"op": "allows", "user": …, "poll": bool}`` → ``{"allows": bool}`` (active memory's
  opt-out cache, ``runtime.consent``);
* ``{"op": "hold_sweep", "ttl": …}`` → ``{"held": bool}``, then keeps the sweep's lease
  (renewed) until the process is killed.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from tests.helpers import new_memory, write_rules


def _reply(value: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(value) + "\n")
    sys.stdout.flush()


async def _serve(rt: Any) -> None:
    _reply({"ready": True})
    while line := await asyncio.to_thread(sys.stdin.readline):
        cmd = json.loads(line)
        if cmd["op"] == "add":
            try:
                rec = await rt.store.add(
                    new_memory(cmd["partition"], "user", cmd["text"]),
                    write_rules(limit=cmd.get("limit")),
                )
                _reply({"id": rec.id})
            except Exception as exc:
                _reply({"error": f"{exc.__class__.__name__}: {exc}"})
        elif cmd["op"] in ("memo", "allows"):
            if cmd.get("poll"):  # applied, or failed and every cache cleared: fresh either way
                await rt.store.coherence.feed.poll()
            if cmd["op"] == "memo":
                _reply(
                    {"text": await rt.memo.get(cmd["key"]), "cached": rt.memo.cached(cmd["key"])}
                )
            else:
                _reply({"allows": await rt.consent.allows(cmd["user"])})
        elif cmd["op"] == "hold_sweep":
            from amrita_plugin_memory.upkeep.archive.sweep import sweep_lease

            leases = rt.store.coherence.leases
            async with leases.attempt(sweep_lease(rt.store), ttl=cmd["ttl"]) as held:
                _reply({"held": held})
                await asyncio.Event().wait()  # until killed


def main() -> None:
    import nonebot

    nonebot.init(**json.loads(sys.argv[1]))
    from nonebot.adapters.onebot.v11 import Adapter

    nonebot.get_driver().register_adapter(Adapter)
    nonebot.load_plugin("amrita_plugin_memory")
    import amrita_plugin_memory

    assert amrita_plugin_memory.runtime is not None
    asyncio.run(_serve(amrita_plugin_memory.runtime))


if __name__ == "__main__":
    main()
