"""The data the published ``amrita-plugin-memory`` 0.8.1 wrote (``tests/published/bot-0.8.1``).

How it was made is in ``tests/published/README.md``. Tests never open the committed files
in place (Chroma and SQLite would write beside them): :func:`copy_fixture` copies the
project's ``data/`` and ``config/`` first, :func:`published_memories` reads a copy.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FIXTURE = Path(__file__).parent / "published" / "bot-0.8.1"
STATE_TABLE = "amrita_plugin_memory_subconscious_state"
MEMORY_COLLECTION = "amrita_user_memory"
KNOWLEDGE_COLLECTION = "amrita_global_knowledge"

OWNER, MEMBER, GROUP = 10001, 10002, 20001
CAT = "用户的猫叫年糕，是只橘猫"  # 10001, said in private
TRIP = "用户下个月去成都出差"  # 10001, said in group 20001 (origin never recorded)
PEANUT = "用户对花生过敏"  # 10002, said in group 20001 (origin never recorded)
CLUB = "本群每周五晚上八点开读书会"  # group 20001's memory
MEMO = "用户是程序员，住在杭州，喜欢简短的回答"
GROUP_MEMO = "本群是读书会群，群主是 10001"
KNOWLEDGE_TITLE = "年糕的饮食"
PROFILE_LINE = "宠物：橘猫年糕"


def copy_fixture(root: Path) -> Path:
    """The fixture's ``data/`` and ``config/`` copied into the bot project ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    for part in ("data", "config"):
        shutil.copytree(FIXTURE / part, root / part, dirs_exist_ok=True)
    return root


def published_payload() -> str:
    """The loop state text the published plugin wrote."""
    db = FIXTURE / "data" / "nonebot_plugin_orm" / "db.sqlite3"
    with sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True) as conn:
        (payload,) = conn.execute(f"select payload from {STATE_TABLE}").fetchone()
    return str(payload)


@dataclass(frozen=True)
class PublishedCollection:
    """One collection as the published plugin left it (rows with their vectors)."""

    metadata: dict[str, Any]
    ids: list[str]
    documents: list[str | None]
    metadatas: list[dict[str, Any]]
    embeddings: list[list[float]]


def published_collections() -> dict[str, PublishedCollection]:
    """Every collection of the fixture's Chroma directory (read from a copy)."""
    import chromadb

    with tempfile.TemporaryDirectory(prefix="apm-published-") as tmp:
        path = Path(tmp) / "vector_db.chroma"
        shutil.copytree(FIXTURE / "data" / "amrita_plugin_memory" / "vector_db.chroma", path)
        client = chromadb.PersistentClient(path=str(path))
        out: dict[str, PublishedCollection] = {}
        try:
            for col in client.list_collections():
                res = col.get(include=["documents", "metadatas", "embeddings"])
                out[col.name] = PublishedCollection(
                    dict(col.metadata or {}),
                    list(res["ids"]),
                    list(res["documents"] or []),
                    [dict(m or {}) for m in res["metadatas"] or []],
                    [
                        [float(x) for x in v]
                        for v in (res["embeddings"] if res["embeddings"] is not None else [])
                    ],
                )
        finally:
            client.clear_system_cache()
    return out
