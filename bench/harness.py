"""The benchmark process: NoneBot with the plugin loaded, local servers, runtimes.

``amrita_plugin_memory`` can only be imported once NoneBot is initialised and
the plugin is loaded (its ``__init__`` requires Amrita's plugins), so the
benchmarks run inside a NoneBot set up the way ``tests/conftest.py`` does it:
FastAPI driver, OneBot V11 adapter, localstore and SQLite in a temporary
directory, the venv's ``bin`` on ``PATH`` (Amrita's webui runs ``uv``). The
driver's lifespan startup is run so that the ORM tables exist.

Servers reused from ``tests/servers``: the embedding server (run as a child
process, see :mod:`bench.embed_server`) and a real ``chroma run`` server for
remote mode.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.servers import ChromaServer

if TYPE_CHECKING:
    from amrita_plugin_memory.services import MemoryRuntime

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
EMBED_MODEL = "nomic-embed-text:latest"  # 384 dimensions on the test server
DIM = 384


class EmbedServerProcess:
    """``tests.servers.EmbeddingServer`` in a child process."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[str] | None = None
        self.url = ""

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self, timeout: float = 30.0) -> None:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.embed_server"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        self._proc = proc
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        if not line.startswith("http://"):
            self.stop()
            raise RuntimeError(f"embedding server did not start (got {line!r})")
        self.url = line

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            if proc.stdin is not None:
                proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


@dataclass
class BenchEnv:
    """Everything the benchmarks share: work dir, servers, the NoneBot driver."""

    work: Path
    embed: EmbedServerProcess
    chroma: ChromaServer | None = None
    runtimes: list[Any] = field(default_factory=list)

    def chroma_server(self) -> ChromaServer:
        """The ``chroma run`` server (started on first use)."""
        if self.chroma is None:
            self.chroma = ChromaServer(self.work / "chroma-server")
            self.chroma.start()
        return self.chroma

    def make_runtime(
        self, name: str, mode: str, *, batch_size: int = 64, memory_limit: int = 100_000
    ) -> MemoryRuntime:
        """A real :class:`MemoryRuntime` on its own data dir (``local``: in-process,
        ``served``: through the plugin's child server) or on the shared server (``remote``)."""
        from amrita_plugin_memory.core.config import ConfigFile, EnvConfig, PluginConfig
        from amrita_plugin_memory.services import MemoryRuntime

        values: dict[str, Any] = {
            # "local": the embedded Chroma in this process (as every local figure
            # in the README was measured); "served": local mode through the child
            # ``chroma run`` the plugin starts by default on Linux.
            "vector_db_type": "local" if mode == "served" else mode,
            "vector_db_local_server": mode == "served",
            "embedding_model_url": self.embed.url,
            "embedding_model_name": EMBED_MODEL,
            "embedding_proctol": "ollama-embed",
            "embedding_timeout_seconds": 60,
            "embed_mismatch_policy": "never",
            "reembed_batch_size": batch_size,
        }
        if mode == "remote":
            server = self.chroma_server()
            values |= {"vector_db_server": server.host, "vector_db_port": server.port}
        data_dir = self.work / "runtimes" / name
        config = PluginConfig(
            env=EnvConfig.load(values),
            file=ConfigFile(per_session_memory_limit=memory_limit),
            config_dir=data_dir / "config",
            data_dir=data_dir,
        )
        rt = MemoryRuntime(config)
        self.runtimes.append(rt)
        return rt


def nonebot_kwargs(work: Path, embed_url: str, *, log_level: str = "WARNING") -> dict[str, Any]:
    """NoneBot's settings for a bench process working in ``work`` (also each
    ``bench.scale_out_worker``, which adds its shared database and Chroma)."""
    return {
        "driver": "~fastapi",
        "log_level": log_level,
        "localstore_use_cwd": True,
        "localstore_config_dir": str(work / "config"),
        "localstore_data_dir": str(work / "data"),
        "localstore_cache_dir": str(work / "cache"),
        "alembic_startup_check": False,
        "sqlalchemy_database_url": f"sqlite+aiosqlite:///{work / 'db.sqlite3'}",
        "embedding_model_url": embed_url,
        "embedding_model_name": EMBED_MODEL,
        "embedding_proctol": "ollama-embed",
        "embed_check_on_startup": False,
        "embed_mismatch_policy": "never",
    }


@contextlib.asynccontextmanager
async def bench_env(keep: bool = False) -> AsyncIterator[BenchEnv]:
    """Start the servers and NoneBot with the plugin loaded; tear everything down after."""
    os.environ["PATH"] = f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    work = Path(tempfile.mkdtemp(prefix="apm-bench-"))
    cwd = Path.cwd()
    embed = EmbedServerProcess()
    env = BenchEnv(work, embed)
    driver: Any = None
    try:
        embed.start()
        import nonebot
        from nonebot.adapters.onebot.v11 import Adapter

        nonebot.init(**nonebot_kwargs(work, embed.url))
        driver = nonebot.get_driver()
        driver.register_adapter(Adapter)
        os.chdir(work)
        nonebot.load_plugin("amrita_plugin_memory")
        await driver._lifespan.startup()
        yield env
    finally:
        for rt in env.runtimes:
            with contextlib.suppress(Exception):
                await rt.close()
        if driver is not None:
            with contextlib.suppress(Exception):
                await driver._lifespan.shutdown()
        if env.chroma is not None:
            env.chroma.stop()
        embed.stop()
        os.chdir(cwd)
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
