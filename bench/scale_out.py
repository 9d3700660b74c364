"""Several processes on one memory: throughput, read latency, staleness, nothing lost.

    uv run --frozen python -m bench.scale_out [--seconds 15] [--users 20] [--postgres | --database-url URL]

1, 2 and 3 store clients, each a separate OS process set up as a bot
(:mod:`bench.scale_out_worker`: NoneBot, the ORM, the plugin loaded, its own
``MemoryStore`` with its caches), in remote mode on one ``chroma run`` server
(one fresh Chroma database per row) and one shared database for the plugin's
tables (a fresh SQLite file per row; with ``--postgres`` a fresh database per row
in a throw-away PostgreSQL cluster; or ``--database-url``, e.g. a PostgreSQL
``postgresql+asyncpg://…``; its tables must exist or be creatable by the
first process). Beside them, one process on the default local mode (the
plugin's child ``chroma run`` on its own data dir). Embeddings come from the
test suite's embedding server (``tests/servers/embedding_server.py``, 384
dimensions, the Ollama protocol) in a process of its own.

Per row:

1. process 0 writes ``--seed`` memories for each of ``--users`` users;
2. **load**: every process runs ``--concurrency`` tasks for ``--seconds``, each
   op a write (``--write-ratio``, ``MemoryStore.add``) or a search
   (``MemoryStore.query``, the recall path) of a random user: total ops/s,
   search p50/p95, write p50;
3. **staleness** (2 processes or more): each process writes a first memory of a
   probe user of its own, every process reads every probe (so it has them
   cached), each process writes a second memory of its probe, and every other
   process polls its search until that memory shows up: the longest time from
   the write's end until a reader sees it (``--patience`` caps the wait);
4. **census**: every memory a process was told was written is stored exactly once,
   and nothing else is stored (lost / duplicated / unknown).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.servers import ChromaServer
from tests.servers.postgres import PostgresServer, find_bindir

from .harness import ROOT, EmbedServerProcess
from .stats import Summary, fmt_ms, load_average

MARK = "SCALE "


class WorkerProcess:
    """One :mod:`bench.scale_out_worker` process and its line protocol."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def start(cls, argv: list[str]) -> WorkerProcess:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.scale_out_worker",
            *argv,
            cwd=ROOT,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            limit=64 * 1024 * 1024,
        )
        worker = cls(proc)
        await worker.answer()  # {"ready": pid}
        return worker

    async def answer(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        tail: list[str] = []
        while line := await self.proc.stdout.readline():
            text = line.decode(errors="replace")
            if text.startswith(MARK):
                return json.loads(text[len(MARK) :])
            tail = [*tail[-30:], text]
        raise RuntimeError("a worker exited:\n" + "".join(tail))

    async def ask(self, op: str, **args: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps({"op": op, **args}) + "\n").encode())
        await self.proc.stdin.drain()
        return await self.answer()

    async def stop(self) -> None:
        with contextlib.suppress(Exception):
            assert self.proc.stdin is not None
            self.proc.stdin.write(b'{"op": "quit"}\n')
            await self.proc.stdin.drain()
        try:
            await asyncio.wait_for(self.proc.wait(), 30)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()


@dataclass
class Result:
    name: str
    processes: int
    ops_per_s: float
    reads: Summary
    writes: Summary
    staleness: float | None  # NaN: not measured (one process); None: not within --patience
    stored: int
    lost: int
    duplicated: int
    unknown: int


async def run_row(
    name: str, processes: int, mode: str, args: argparse.Namespace, ctx: dict[str, Any]
) -> Result:
    work: Path = ctx["work"] / name
    database_url = args.database_url or f"sqlite+aiosqlite:///{work / 'shared.sqlite3'}"
    if ctx.get("postgres") is not None:  # a fresh database of the throw-away cluster
        server = ctx["postgres"]
        database_url = server.url(await asyncio.to_thread(server.create_database, "scale"))
    await asyncio.to_thread(work.mkdir, parents=True)
    base = ["--embed", ctx["embed"].url, "--mode", mode, "--database-url", database_url]
    if mode == "remote":
        chroma: ChromaServer = ctx["chroma"]
        base += ["--chroma-host", chroma.host, "--chroma-port", str(chroma.port)]
        base += ["--chroma-database", f"scale_{name}_{uuid.uuid4().hex[:6]}"]
    workers: list[WorkerProcess] = []
    try:
        for i in range(processes):  # one after the other: the first creates the tables
            argv = [*base, "--work", str(work / f"p{i}"), "--index", str(i)]
            workers.append(await WorkerProcess.start(argv))
        users = [f"QQPlatform_Private_{20000 + u}" for u in range(args.users)]
        acknowledged = list(
            (await workers[0].ask("seed", users=users, per_user=args.seed))["writes"]
        )

        started = time.monotonic()
        loads = await asyncio.gather(
            *(
                w.ask(
                    "load",
                    users=users,
                    seconds=args.seconds,
                    write_ratio=args.write_ratio,
                    concurrency=args.concurrency,
                )
                for w in workers
            )
        )
        elapsed = time.monotonic() - started
        reads = [x for load in loads for x in load["reads"]]
        write_times = [x for load in loads for x in load["write_latencies"]]
        for load in loads:
            acknowledged += load["writes"]

        staleness = math.nan
        if processes > 1:
            staleness, probes = await _staleness(workers, args.patience)
            acknowledged += probes

        rows = (await workers[0].ask("census"))["rows"]
    finally:
        for worker in workers:
            await worker.stop()
    stored = Counter(i for i, _ in rows)
    told = {row["id"] for row in acknowledged}
    texts = Counter(doc for _, doc in rows)
    return Result(
        name=name,
        processes=processes,
        ops_per_s=(len(reads) + len(write_times)) / elapsed,
        reads=Summary.of(reads),
        writes=Summary.of(write_times),
        staleness=staleness,
        stored=len(rows),
        lost=len(told - set(stored)),
        duplicated=sum(n - 1 for n in stored.values() if n > 1)
        + sum(n - 1 for n in texts.values() if n > 1),
        unknown=len(set(stored) - told),
    )


async def _staleness(
    workers: list[WorkerProcess], patience: float
) -> tuple[float | None, list[dict[str, Any]]]:
    """The longest time until another process's search returns a memory just written."""
    probes = [f"QQPlatform_Private_{30000 + i}" for i in range(len(workers))]
    firsts = await asyncio.gather(
        *(
            w.ask("write", partition=p, content=f"探针 {p} 的第一条：在杭州")
            for w, p in zip(workers, probes, strict=True)
        )
    )
    await asyncio.gather(*(w.ask("warm", partitions=probes) for w in workers))
    seconds = await asyncio.gather(
        *(
            w.ask("write", partition=p, content=f"探针 {p} 的第二条：喜欢拉面")
            for w, p in zip(workers, probes, strict=True)
        )
    )
    polls = await asyncio.gather(
        *(
            w.ask("poll", targets=[t for j, t in enumerate(seconds) if j != i], patience=patience)
            for i, w in enumerate(workers)
        )
    )
    seen = [s for poll in polls for s in poll["seen"]]
    longest = None if any(s is None for s in seen) else max(seen)
    return longest, [*firsts, *seconds]


def _staleness_text(value: float | None, patience: float) -> str:
    if value is None:
        return f"> {patience:.0f} s"
    if math.isnan(value):
        return "-"
    return f"{value:.2f} s"


def format_rows(results: list[Result], patience: float) -> str:
    headers = (
        "row", "processes", "ops/s", "search p50", "search p95", "write p50",
        "longest staleness", "stored", "lost", "duplicated", "unknown",
    )  # fmt: skip
    cells = [
        (
            r.name,
            str(r.processes),
            f"{r.ops_per_s:.1f}",
            fmt_ms(r.reads.p50),
            fmt_ms(r.reads.p95),
            fmt_ms(r.writes.p50),
            _staleness_text(r.staleness, patience),
            str(r.stored),
            str(r.lost),
            str(r.duplicated),
            str(r.unknown),
        )
        for r in results
    ]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
    lines = [" | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append("-+-".join("-" * w for w in widths))
    lines += [" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)


def database_name(args: argparse.Namespace) -> str:
    if args.postgres:
        return "PostgreSQL (a fresh database per row)"
    return args.database_url or "SQLite file per row"


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale_out")
    parser.add_argument("--seconds", type=float, default=15.0, help="load phase per row")
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--seed", type=int, default=5, help="memories per user before the load")
    parser.add_argument("--write-ratio", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=4, help="tasks per process")
    parser.add_argument("--patience", type=float, default=90.0, help="staleness wait cap (s)")
    parser.add_argument("--processes", default="1,2,3", help="remote rows")
    parser.add_argument("--no-local", action="store_true", help="skip the local-mode row")
    parser.add_argument(
        "--database-url", default="", help="the shared plugin database (default: SQLite file)"
    )
    parser.add_argument(
        "--postgres",
        action="store_true",
        help="a fresh database per row in a throw-away PostgreSQL cluster (tests/servers/postgres.py)",
    )
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="apm-scale-"))
    embed = EmbedServerProcess()
    chroma = ChromaServer(work / "chroma-server")
    results: list[Result] = []
    postgres: PostgresServer | None = None
    try:
        embed.start()
        chroma.start()
        if args.postgres:
            bindir = find_bindir()
            if bindir is None:
                parser.error("--postgres: PostgreSQL server binaries not found")
            postgres = PostgresServer(bindir)
            postgres.start()
        ctx = {"work": work, "embed": embed, "chroma": chroma, "postgres": postgres}
        if not args.no_local:
            results.append(await run_row("local", 1, "local", args, ctx))
            print(format_rows(results, args.patience), flush=True)
        for n in (int(x) for x in args.processes.split(",")):
            results.append(await run_row(f"remote-{n}", n, "remote", args, ctx))
            print(format_rows(results[-1:], args.patience), flush=True)
    finally:
        if postgres is not None:
            postgres.stop()
        chroma.stop()
        embed.stop()
        shutil.rmtree(work, ignore_errors=True)
    print()
    print(
        f"scale_out: --seconds {args.seconds:g} --users {args.users} --seed {args.seed} "
        f"--write-ratio {args.write_ratio:g} --concurrency {args.concurrency}; "
        f"database {database_name(args)}; "
        f"embeddings: tests/servers/embedding_server.py; {load_average()}"
    )
    print(format_rows(results, args.patience))
    bad = [r for r in results if r.lost or r.duplicated or r.unknown]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
