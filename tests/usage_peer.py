"""A second OS process adding to the usage ledger (``tests/test_usage_ledger.py``).

It loads the plugin headless (``nonebot.init`` + ``load_plugin``: the runtime a bot
builds, its ledger on the plugin's bind ``SQLALCHEMY_BINDS["amrita_plugin_memory"]``)
with the init arguments given as JSON in ``argv[1]``, prints ``{"ready": true}``, then
answers one JSON command per stdin line with one JSON line:

* ``{"op": "add", "at": <iso datetime>, "feature": …, "user": …, "times": n,
  "concurrency": k, "prompt": p, "completion": c}`` → ``{"added": n}``: ``n`` requests
  of ``p``/``c`` tokens added through ``runtime.usage`` (``k`` at a time), the ledger's
  clock fixed at ``at``;
* ``{"op": "admit", "at": …, "feature": …, "user": …, "day_cap": …, "user_cap": …}`` →
  ``{"allowed": bool, "cap": …}``: what ``runtime.budget`` answers with those caps.
"""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import datetime
from typing import Any


def _reply(value: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(value) + "\n")
    sys.stdout.flush()


async def _add(rt: Any, cmd: dict[str, Any]) -> dict[str, Any]:
    from amrita_plugin_memory.storage.usage import Spend

    spend = Spend(requests=1, prompt_tokens=cmd["prompt"], completion_tokens=cmd["completion"])
    left = cmd["times"]
    while left:
        batch = min(left, cmd["concurrency"])
        await asyncio.gather(
            *(rt.usage.add(cmd["feature"], cmd["user"], spend) for _ in range(batch))
        )
        left -= batch
    return {"added": cmd["times"], "written": await rt.usage.flush()}


async def _admit(rt: Any, cmd: dict[str, Any]) -> dict[str, Any]:
    from amrita_plugin_memory.core.config import BudgetConfig

    rt.budget.configure(
        BudgetConfig(
            background_tokens_per_day=cmd["day_cap"],
            background_tokens_per_user_per_day=cmd["user_cap"],
        )
    )
    admission = await rt.budget.admit(cmd["feature"], cmd["user"])
    return {"allowed": admission.allowed, "cap": admission.cap}


async def _serve(rt: Any) -> None:
    _reply({"ready": True})
    while line := await asyncio.to_thread(sys.stdin.readline):
        cmd = json.loads(line)
        at = datetime.fromisoformat(cmd["at"])
        rt.usage.clock = lambda at=at: at
        try:
            if cmd["op"] == "add":
                _reply(await _add(rt, cmd))
            elif cmd["op"] == "admit":
                _reply(await _admit(rt, cmd))
        except Exception as exc:
            _reply({"error": f"{exc.__class__.__name__}: {exc}"})


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
