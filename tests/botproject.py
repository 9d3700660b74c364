"""Helpers for the embedding/remap/CLI tests.

* :func:`make_runtime` builds a real :class:`MemoryRuntime` on a directory of
  its own (embedded Chroma) or on the ``chroma run`` test server.
* :func:`seed`, :func:`snapshot` and :func:`dims` write and read collections
  directly, so tests can compare ids, documents and metadatas exactly.
* :class:`BotProject` is a throw-away AmritaBot project directory in which
  the real ``ambot memory …`` command runs as a subprocess.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.conftest import EMBED, env_for
from tests.servers import ChromaEndpoint, ChromaServer

VENV_BIN = Path(sys.executable).parent
NOMIC = "nomic-embed-text:latest"  # 384 dimensions on the test server
BGE = "bge-m3:latest"  # 768 dimensions on the test server

ALICE = "QQPlatform_Private_10001"
BOB = "QQPlatform_Private_10002"
GROUP = "QQPlatform_Group_20001"


def make_runtime(
    data_dir: Path,
    *,
    mode: str = "local",
    chroma: ChromaEndpoint | None = None,
    memory_name: str | None = None,
    knowledge_name: str | None = None,
    timezone: str = "",
    **env: Any,
) -> Any:
    """A real runtime whose data dir is ``data_dir`` (fast-failing embedder);
    ``timezone``: its ``[memory] timezone`` (the owner's calendar)."""
    from amrita_plugin_memory.core.config import ConfigFile, PluginConfig, SubconsciousConfig
    from amrita_plugin_memory.core.config_sections import MemoryConfig
    from amrita_plugin_memory.services import MemoryRuntime

    file = ConfigFile(memory=MemoryConfig(timezone=timezone))
    if knowledge_name:
        file = file.model_copy(
            update={"subconscious": SubconsciousConfig(knowledge_collection_name=knowledge_name)}
        )
    config = PluginConfig(
        env=env_for(mode, chroma, **env),
        file=file,
        config_dir=data_dir / "config",
        data_dir=data_dir,
    )
    rt = MemoryRuntime(config)
    if memory_name:  # and its own archive (deletes and updates write into it)
        from amrita_plugin_memory.storage.archive.store import ArchiveStore, archive_name

        rt.store.name = memory_name
        rt.store.archive = ArchiveStore(rt.connection, archive_name(memory_name))
    rt.embedder.max_retries = 0
    rt.embedder.backoff = 0.01
    return rt


def memory_meta(partition: str, scope: str = "user", **extra: Any) -> dict[str, Any]:
    meta = {
        "user_id": partition,
        "scope": scope,
        "tags": '["测试"]',
        "importance": "medium",
        "created_at": "2025-01-01T00:00:00+00:00",
        "updated_at": "2025-01-01T00:00:00+00:00",
    }
    meta.update(extra)
    return meta


def sample_memories(
    n: int, partition: str = ALICE, prefix: str = "m"
) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (f"{prefix}{i:04d}", f"记忆 {prefix}{i}：用户喜欢第 {i} 号苹果", memory_meta(partition))
        for i in range(n)
    ]


def sample_knowledge(n: int) -> list[tuple[str, str | None, dict[str, Any] | None]]:
    items: list[tuple[str, str | None, dict[str, Any] | None]] = [
        (
            f"KNOWLEDGE_{i}",
            f"知识条目 {i}：如何整理记忆",
            {"kid": f"KNOWLEDGE_{i}", "title": f"标题{i}", "line": i},
        )
        for i in range(n)
    ]
    if n >= 2:  # odd but legal entries must survive too
        items[-1] = ("KNOWLEDGE_nometa", "没有 metadata 的知识", None)
    return items


async def seed(
    rt: Any,
    name: str,
    items: Sequence[tuple[str, str | None, Mapping[str, Any] | None]],
    *,
    metadata: Mapping[str, Any] | None = None,
) -> None:
    """Add items with vectors from the runtime's embedder (creating the collection)."""
    conn = rt.connection
    col = await conn.get_collection(name)
    if metadata:
        await conn.run(col.modify, metadata=dict(metadata))
    for start in range(0, len(items), 100):
        chunk = items[start : start + 100]
        vectors = await rt.embedder.embed([doc or "" for _, doc, _ in chunk])
        await conn.run(
            functools.partial(
                col.add,
                ids=[i for i, _, _ in chunk],
                documents=[d for _, d, _ in chunk],
                embeddings=vectors,
                metadatas=[dict(m) if m is not None else None for _, _, m in chunk],
            )
        )
    rt.store.invalidate()


async def snapshot(rt: Any, name: str) -> dict[str, tuple[str | None, dict[str, Any] | None]]:
    """``{id: (document, metadata)}`` of a whole collection."""
    col = await rt.connection.get_collection(name, create=False)
    assert col is not None, f"collection {name} missing"
    res = await rt.connection.run(lambda: col.get(include=["documents", "metadatas"]))
    return {
        i: (d, dict(m) if m is not None else None)
        for i, d, m in zip(res["ids"], res["documents"], res["metadatas"], strict=True)
    }


async def dims(rt: Any, name: str) -> set[int]:
    col = await rt.connection.get_collection(name, create=False)
    assert col is not None
    res = await rt.connection.run(lambda: col.get(include=["embeddings"]))
    return {len(v) for v in res["embeddings"]}


async def collection_meta(rt: Any, name: str) -> dict[str, Any]:
    col = await rt.connection.get_collection(name, create=False)
    assert col is not None
    return dict(col.metadata or {})


# ---------------------------------------------------------------------------
# A bot project for `ambot memory ...`
# ---------------------------------------------------------------------------

PYPROJECT = """\
[project]
name = "memory-cli-test-bot"
version = "0.1.0"
requires-python = ">=3.11"

[tool.nonebot]
plugin_dirs = []
builtin_plugins = []

[tool.amrita]
plugins = ["amrita_plugin_memory"]
"""


class BotProject:
    """A temporary AmritaBot project; :meth:`ambot` runs the real CLI in it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        (root / "pyproject.toml").write_text(PYPROJECT, encoding="utf-8")
        self.env: dict[str, str] = {}
        self.write_env()

    @property
    def data_dir(self) -> Path:
        return self.root / "data" / "amrita_plugin_memory"

    @property
    def backup_dir(self) -> Path:
        return self.data_dir / "backups"

    def write_env(self, **values: Any) -> None:
        """Rewrite ``.env`` (the defaults point at the session's embedding server)."""
        self.env = {
            "DRIVER": "~fastapi",
            "LOCALSTORE_USE_CWD": "true",
            "ALEMBIC_STARTUP_CHECK": "false",
            "LOG_LEVEL": "WARNING",
            "EMBEDDING_MODEL_URL": EMBED.url,
            "EMBEDDING_MODEL_NAME": NOMIC,
            "EMBEDDING_PROCTOL": "ollama-embed",
            "EMBEDDING_TIMEOUT_SECONDS": "5",
            "REEMBED_BATCH_SIZE": "16",
        }
        self.env.update({k.upper(): str(v) for k, v in values.items()})
        text = "\n".join(f"{k}={v}" for k, v in self.env.items()) + "\n"
        (self.root / ".env").write_text(text, encoding="utf-8")

    def write_remote_env(self, chroma: ChromaServer, database: str, **values: Any) -> None:
        """``.env`` for remote mode on the session's ``chroma run``, in a fresh database
        named ``<database>_<random>`` (tests sharing the server never see each other)."""
        self.write_env(
            VECTOR_DB_TYPE="remote",
            VECTOR_DB_SERVER=chroma.host,
            VECTOR_DB_PORT=chroma.port,
            VECTOR_DB_DATABASE=f"{database}_{uuid.uuid4().hex[:8]}",
            **values,
        )

    def spawn_ambot(self, *args: str) -> subprocess.Popen[bytes]:
        """``ambot <args>`` started in its own session, output discarded: a test can
        SIGKILL its whole process group mid-way (``os.killpg(proc.pid, ...)``)."""
        return subprocess.Popen(
            [str(VENV_BIN / "ambot"), *args],
            cwd=self.root,
            env=self.process_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def runtime(self, **extra: Any) -> Any:
        """An in-process runtime on this project's data dir and current ``.env``."""
        keys = {
            "EMBEDDING_MODEL_NAME",
            "EMBEDDING_MODEL_URL",
            "EMBEDDING_PROCTOL",
            "VECTOR_DB_TYPE",
            "VECTOR_DB_SERVER",
            "VECTOR_DB_PORT",
            "VECTOR_DB_DATABASE",
            "REEMBED_BATCH_SIZE",
            "REEMBED_BACKUP_KEEP",
        }
        values: dict[str, Any] = {k.lower(): v for k, v in self.env.items() if k in keys}
        values.update(extra)
        mode = values.pop("vector_db_type", "local")
        return make_runtime(self.data_dir, mode=mode, **values)

    def process_env(self) -> dict[str, str]:
        """Environment of an ``ambot`` subprocess in this project."""
        env = {k: v for k, v in os.environ.items() if k != "AMBOT_COMMAND_CONTEXT"}
        env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"  # Amrita's webui needs uv
        env["PYTHONUNBUFFERED"] = "1"
        env["NO_COLOR"] = "1"
        return env

    def ambot(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        """Run ``ambot memory <args>`` in the project, stdin not a TTY."""
        return self.command("memory", *args, timeout=timeout)

    def command(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        """Run ``ambot <args>`` in the project, stdin not a TTY."""
        env = self.process_env()
        return subprocess.run(
            [str(VENV_BIN / "ambot"), *args],
            cwd=self.root,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def ambot_ok(proc: subprocess.CompletedProcess[str]) -> str:
    """The output of an ``ambot`` run that must succeed (exit 0, no traceback)."""
    assert proc.returncode == 0, f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stdout + proc.stderr
    return proc.stdout


def ambot_refused(proc: subprocess.CompletedProcess[str]) -> str:
    """Exit code 1 and exactly one ``错误：`` line, no traceback (a hostile input, counted)."""
    from tests.reliability_stats import STATS

    assert proc.returncode == 1, f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stdout + proc.stderr
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("错误：")]
    STATS.inputs_tried += 1
    return line
