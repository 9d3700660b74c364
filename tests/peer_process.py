"""``tests/coherence_peer.py`` as a second OS process: started, asked, killed.

:class:`PeerProcess` starts the peer with the NoneBot init arguments a test gives
(remote Chroma for the coherence tests, a bound plugin database for the usage
ledger's), sends it one JSON command per line and reads its JSON answers.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import EMBED, EMBED_MODEL, WORK

ROOT = Path(__file__).resolve().parent.parent

__all__ = ["PeerProcess", "peer_init"]


def peer_init(data: Path, cache: Path, **more: Any) -> dict[str, Any]:
    """NoneBot init arguments of a peer: the session's config and embedding server, its own
    data and cache dirs, the schema synchronised by nobody (``more`` adds or overrides)."""
    return {
        "driver": "~fastapi",
        "log_level": "WARNING",
        "localstore_use_cwd": True,
        "localstore_config_dir": str(WORK / "config"),
        "localstore_data_dir": str(data),
        "localstore_cache_dir": str(cache),
        "alembic_startup_check": False,
        "embedding_model_url": EMBED.url,
        "embedding_model_name": EMBED_MODEL,
        "embedding_proctol": "ollama-embed",
        **more,
    }


class PeerProcess:
    """One ``tests/coherence_peer.py`` loaded with ``init`` (``nonebot.init`` arguments)."""

    def __init__(self, init: dict[str, Any]) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        # PEER_STDERR=<file> keeps the peer's log (a failing run's story); else it is dropped.
        self._stderr = open(os.environ.get("PEER_STDERR", os.devnull), "w")
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "coherence_peer.py"), json.dumps(init)],
            cwd=WORK,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )

    async def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        async with asyncio.timeout(120):  # hang guard (the plugin's import takes seconds)
            while True:
                line = await asyncio.to_thread(self.proc.stdout.readline)
                if not line:
                    raise AssertionError("the peer process exited")
                if line.startswith("{"):
                    return json.loads(line)

    def send(self, **cmd: Any) -> None:
        """One command; its answer is the next :meth:`read` (the peer works meanwhile)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    async def ask(self, **cmd: Any) -> dict[str, Any]:
        self.send(**cmd)
        return await self.read()

    async def exited(self) -> int:
        """The exit status, once the process has ended by itself."""
        async with asyncio.timeout(120):  # hang guard
            return await asyncio.to_thread(self.proc.wait)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self._stderr.close()
