"""One store client of :mod:`bench.scale_out`: a NoneBot process with the plugin loaded.

    python -m bench.scale_out_worker --embed URL --mode remote --chroma-port 8000 \
        --chroma-database NAME --database-url sqlite+aiosqlite:///… --work DIR

The process is set up as ``ambot run`` sets up a bot (NoneBot, the OneBot
adapter, the ORM with the plugin's tables bound to ``--database-url``, the
plugin loaded and its start-up run), and works on the plugin's own runtime
(``amrita_plugin_memory.runtime``: the ``MemoryStore`` a bot's chat tools use,
with its caches). It reads one JSON command a line on stdin and answers each
with one line ``SCALE <json>`` on stdout (other lines are NoneBot's log).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

from bench.harness import nonebot_kwargs as base_kwargs
from tests.helpers import new_memory, view_of

VENV_BIN = Path(sys.executable).parent
MARK = "SCALE "

ITEMS = ("苹果", "小提琴", "围棋", "黑胶唱片", "多肉植物", "登山", "咖啡", "油画", "潜水", "拉面")
CITIES = ("杭州", "成都", "西安", "大连", "厦门", "昆明", "青岛", "南京", "长沙", "桂林")


def fact(tag: str, n: int) -> str:
    """A memory text of its own (no two are true repeats): the tag and number make it unique."""
    rng = random.Random(f"{tag}-{n}")
    return f"{tag} 第 {n} 条：在{rng.choice(CITIES)}喜欢{rng.choice(ITEMS)}，编号 {rng.randrange(10**6)}"


def nonebot_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(args.work)
    values = base_kwargs(work, args.embed, log_level="ERROR") | {
        "sqlalchemy_binds": {"amrita_plugin_memory": args.database_url},
        "embedding_timeout_seconds": 60,
        "vector_db_type": args.mode,
    }
    if args.mode == "remote":
        values |= {
            "vector_db_server": args.chroma_host,
            "vector_db_port": args.chroma_port,
            "vector_db_database": args.chroma_database,
        }
    return values


def say(obj: Any) -> None:
    print(MARK + json.dumps(obj, ensure_ascii=False), flush=True)


class Worker:
    """The commands of one process, on the plugin's store."""

    def __init__(self, store: Any, index: int) -> None:
        self.store = store
        self.index = index
        self.written = 0

    async def write(self, partition: str, content: str) -> dict[str, Any]:
        record = await self.store.add(new_memory(partition, "user", content, tags=["bench"]))
        self.written += 1
        return {"id": record.id, "partition": partition, "content": content}

    async def seed(self, users: list[str], per_user: int) -> dict[str, Any]:
        rows = [
            await self.write(user, fact(f"{user} 初始", n))
            for user in users
            for n in range(per_user)
        ]
        return {"writes": rows}

    async def load(
        self, users: list[str], seconds: float, write_ratio: float, concurrency: int
    ) -> dict[str, Any]:
        """Mixed writes and reads over ``users`` from ``concurrency`` tasks for ``seconds``."""
        rng = random.Random(self.index)
        reads: list[float] = []
        writes: list[float] = []
        rows: list[dict[str, Any]] = []
        end = time.monotonic() + seconds

        async def client(task: int) -> None:
            n = 0
            while time.monotonic() < end:
                user = rng.choice(users)
                started = time.perf_counter()
                if rng.random() < write_ratio:
                    n += 1
                    rows.append(await self.write(user, fact(f"p{self.index}t{task}", n)))
                    writes.append(time.perf_counter() - started)
                else:
                    await self.store.query(
                        view_of(user), f"{user} 喜欢{rng.choice(ITEMS)}", top_k=5
                    )
                    reads.append(time.perf_counter() - started)

        await asyncio.gather(*(client(t) for t in range(concurrency)))
        return {"reads": reads, "write_latencies": writes, "writes": rows}

    async def warm(self, partitions: list[str]) -> dict[str, Any]:
        """Read each partition (search and list): its views are now cached here."""
        for partition in partitions:
            await self.store.query(view_of(partition), "喜欢什么", top_k=5)
            await self.store.list(view_of(partition), limit=100)
        return {"warm": len(partitions)}

    async def poll(self, targets: list[dict[str, Any]], patience: float) -> dict[str, Any]:
        """For each written ``{partition, id, content, done}``: seconds from ``done`` (the
        writer's clock, the same machine's) until this process's search returns it."""

        async def one(target: dict[str, Any]) -> float | None:
            while True:
                hits = await self.store.query(
                    view_of(target["partition"]), target["content"], top_k=5
                )
                if any(h.id == target["id"] for h in hits):
                    return time.time() - target["done"]
                if time.time() - target["done"] > patience:
                    return None
                await asyncio.sleep(0.02)

        return {"seen": await asyncio.gather(*(one(t) for t in targets))}

    async def census(self) -> dict[str, Any]:
        """Every stored memory, read from Chroma page by page (no cache)."""
        rows: list[list[str]] = []
        async for page in self.store.iter_all_records(with_documents=True):
            rows += [[r.id, r.content] for r in page]
        return {"rows": rows}

    async def handle(self, command: dict[str, Any]) -> dict[str, Any]:
        op = command.pop("op")
        if op == "write":
            row = await self.write(command["partition"], command["content"])
            return {**row, "done": time.time()}
        handler = {
            "seed": self.seed,
            "load": self.load,
            "warm": self.warm,
            "poll": self.poll,
            "census": self.census,
        }[op]
        return await handler(**command)


async def run(args: argparse.Namespace) -> None:
    os.environ["PATH"] = f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    import nonebot
    from nonebot.adapters.onebot.v11 import Adapter

    nonebot.init(**nonebot_kwargs(args))
    driver: Any = nonebot.get_driver()
    driver.register_adapter(Adapter)
    os.chdir(args.work)
    nonebot.load_plugin("amrita_plugin_memory")
    await driver._lifespan.startup()
    import amrita_plugin_memory

    runtime = amrita_plugin_memory.runtime
    assert runtime is not None, "the plugin did not start"
    worker = Worker(runtime.store, args.index)
    say({"ready": os.getpid()})
    try:
        while line := await asyncio.to_thread(sys.stdin.readline):
            command = json.loads(line)
            if command.get("op") == "quit":
                break
            say(await worker.handle(command))
    finally:
        await driver._lifespan.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--embed", required=True)
    parser.add_argument("--mode", choices=("local", "remote"), default="remote")
    parser.add_argument("--chroma-host", default="127.0.0.1")
    parser.add_argument("--chroma-port", type=int, default=8000)
    parser.add_argument("--chroma-database", default="default")
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--index", type=int, default=0)
    args = parser.parse_args()
    Path(args.work).mkdir(parents=True, exist_ok=True)
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
