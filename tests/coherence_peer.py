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
  (renewed) until the process is killed;
* ``{"op": "usage_add", "at": <iso datetime>, "feature": …, "user": …, "times": n,
  "concurrency": k, "prompt": p, "completion": c}`` → ``{"added": n, "written": bool}``:
  ``n`` requests of ``p``/``c`` tokens added through the runtime's usage ledger (``k`` at a
  time), its clock fixed at ``at``;
* ``{"op": "usage_admit", "at": …, "feature": …, "user": …, "day_cap": …, "user_cap": …}``
  → ``{"allowed": bool, "cap": …}``: what the runtime's budget answers with those caps.
* ``{"op": "add_then_die", "partition": …, "text": …}`` → no answer: the memory is written
  to Chroma and the process exits at once (``os._exit``, as ``kill -9`` would end it)
  before the write's feed row;
* ``{"op": "anonymize", "group": …, "value": bool}`` → ``{"ok": true}`` (the group stores a
  bot builds, ``GroupStores.build``);
* ``{"op": "self_add", "text": …}`` → ``{"ok": bool}``, ``{"op": "self_delete", "number": …}``
  → ``{"deleted": text | None}`` (the self memory);
* ``{"op": "knowledge_list"}`` → ``{"kids": […]}``, ``{"op": "knowledge_create", "title": …,
  "summary": …, "body": …}`` → ``{"kid": …}``, ``{"op": "knowledge_delete", "kid": …}`` →
  ``{"ok": true}`` (the L3 knowledge base, built as the loop's runner builds it);
* ``{"op": "profile_insert", "content": …}`` → ``{"ok": true}``, ``{"op": "profile_text"}`` →
  ``{"text": …}`` (the L3 loop's user profile about ``subject``, built as the runner builds it).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from tests.helpers import new_memory, user_view, view_of, write_rules


def _reply(value: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(value) + "\n")
    sys.stdout.flush()


async def _usage(rt: Any, cmd: dict[str, Any]) -> dict[str, Any]:
    from datetime import datetime
    from zoneinfo import ZoneInfo

    from amrita_plugin_memory.core.calendar import OwnerCalendar
    from amrita_plugin_memory.core.config import BudgetConfig
    from amrita_plugin_memory.storage.usage import Spend

    at = datetime.fromisoformat(cmd["at"])
    # The owner's days of the test (Beijing), whatever this process's machine zone.
    rt.usage.calendar = OwnerCalendar(ZoneInfo("Asia/Shanghai"), lambda: at)
    if cmd["op"] == "usage_admit":
        caps = {"background_tokens_per_day": cmd["day_cap"]}
        caps["background_tokens_per_user_per_day"] = cmd["user_cap"]
        rt.budget.configure(BudgetConfig(**caps))
        admission = await rt.budget.admit(cmd["feature"], user_view(cmd["user"]))
        return {"allowed": admission.allowed, "cap": admission.cap}
    spend = Spend(requests=1, prompt_tokens=cmd["prompt"], completion_tokens=cmd["completion"])
    left = cmd["times"]
    while left:
        batch = min(left, cmd["concurrency"])
        await asyncio.gather(
            *(rt.usage.add(cmd["feature"], cmd["user"], spend) for _ in range(batch))
        )
        left -= batch
    return {"added": cmd["times"], "written": await rt.usage.flush()}


async def _add_then_die(rt: Any, cmd: dict[str, Any]) -> None:
    async def die(partitions: Any) -> None:
        os._exit(9)  # killed between the Chroma write and its feed row

    rt.store.coherence.feed.publish = die
    await rt.store.add(new_memory(cmd["partition"], "user", cmd["text"]))


async def _groups(rt: Any, cmd: dict[str, Any], stores: list[Any]) -> dict[str, Any]:
    from amrita_plugin_memory.storage.groups.stores import GroupStores

    if not stores:
        stores.append(GroupStores.build(rt.config.file, rt.store.coherence))
    groups = stores[0]
    if cmd["op"] == "anonymize":
        await groups.directory.set_anonymize(cmd["group"], cmd["value"])
        return {"ok": True}
    if cmd["op"] == "self_add":
        return {"ok": (await groups.self_memory.add(cmd["text"])).ok}
    entry = await groups.self_memory.delete(cmd["number"])
    return {"deleted": entry.content if entry is not None else None}


async def _loop_data(rt: Any, cmd: dict[str, Any]) -> dict[str, Any]:
    from amrita_plugin_memory.subconscious.knowledge_base import KnowledgeBaseManager
    from amrita_plugin_memory.subconscious.profile_store import ProfileStore

    config = rt.config.file.subconscious
    kb = KnowledgeBaseManager(  # as SubconsciousRunner builds it
        root=rt.config.data_dir,
        connection=rt.connection,
        embedder=rt.embedder,
        collection_name=config.knowledge_collection_name,
        max_chars=config.knowledge_max_chars,
        shared=rt.store.coherence,
    )
    profile = ProfileStore.of(
        rt.config.data_dir,
        rt.store.coherence,
        cmd.get("subject") or rt.config.file.subconscious.target_user_id,
        rt.forgotten.forgotten_at,
    )
    op = cmd["op"]
    if op == "knowledge_list":
        return {"kids": [e["kid"] for e in await kb.list()]}
    if op == "knowledge_create":
        return {"kid": (await kb.create(cmd["title"], cmd["summary"], cmd["body"])).kid}
    if op == "knowledge_delete":
        await kb.delete(cmd["kid"])
        return {"ok": True}
    if op == "profile_insert":
        await profile.update("insert", section="body", start_line=1, content=cmd["content"])
        return {"ok": True}
    return {"text": await profile.text()}


async def _serve(rt: Any) -> None:
    _reply({"ready": True})
    groups: list[Any] = []
    while line := await asyncio.to_thread(sys.stdin.readline):
        cmd = json.loads(line)
        if cmd["op"].startswith(("knowledge_", "profile_")):
            _reply(await _loop_data(rt, cmd))
        elif cmd["op"] == "add_then_die":
            await _add_then_die(rt, cmd)
        elif cmd["op"] in ("anonymize", "self_add", "self_delete"):
            _reply(await _groups(rt, cmd, groups))
        elif cmd["op"] == "add":
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
                    {
                        "text": await rt.memo.get(view_of(cmd["key"])),
                        "cached": rt.memo.cached(cmd["key"]),
                    }
                )
            else:
                _reply({"allows": await rt.consent.allows(user_view(cmd["user"]))})
        elif cmd["op"] in ("usage_add", "usage_admit"):
            _reply(await _usage(rt, cmd))
        elif cmd["op"] == "embed_pending":  # the background embedding's pass, once
            rt.pending.lease_ttl = cmd["ttl"]
            done = await rt.pending.run_once()
            _reply({"embedded": done.embedded, "busy": done.busy})
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
    # As a bot's start-up does (nonebot_plugin_orm's ``init_orm``): fresh engines for the
    # serving loop. The start-up check ran on a loop of its own, and an asyncpg connection
    # pooled there cannot serve another loop.
    import nonebot_plugin_orm

    nonebot_plugin_orm._init_orm()
    asyncio.run(_serve(amrita_plugin_memory.runtime))


if __name__ == "__main__":
    main()
