"""Switches and lists that change at run time have one home, seen by every process (#39 item 8).

Two real processes on one Chroma store and one PostgreSQL database: this test
process (its own group stores, knowledge base and profile, built as a bot builds
them in remote mode) and ``tests/coherence_peer.py`` (the plugin's runtime,
headless). What one changes, the other sees at its next read past ``MAX_LAG``
(:class:`tests.test_coherence.Lag`: the read's feed clock is moved on, no
sleeping), where it used to keep its own copy until it restarted: the
anonymisation switch (nicknames and QQ ids went to the model), the self memory
(a deleted entry still injected, ``max_chars`` checked against a stale list), and
the L3 knowledge base and profile, which were files on one machine's disk.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.conftest import env_for
from tests.test_coherence import Lag, Peer, peer_database
from tests.test_shared_bounds import pg

__all__ = ["peer_database", "pg"]  # the fixtures, imported for pytest


@pytest.fixture
async def here(
    pg: SimpleNamespace,
    chroma_server: Any,
    embed_server: Any,
    peer_database: str,
    tmp_path: Path,
) -> AsyncIterator[SimpleNamespace]:
    """This process's side (remote mode, the plugin's tables on ``pg``) and the peer."""
    from amrita_plugin_memory.embedding.client import EmbeddingClient
    from amrita_plugin_memory.storage.chroma.connection import ChromaConnection
    from amrita_plugin_memory.storage.memory_store import MEMORY_COLLECTION
    from amrita_plugin_memory.storage.shared.coherence import Coherence

    env = env_for("remote", chroma_server, vector_db_database=peer_database)
    coherence = Coherence.remote(env, MEMORY_COLLECTION)  # this process's, as the runtime's
    side = SimpleNamespace(
        env=env,
        coherence=coherence,
        lag=Lag(SimpleNamespace(coherence=coherence)),
        connection=ChromaConnection(env, tmp_path / "chroma"),
        embedder=EmbeddingClient.from_env(env),
        data_dir=tmp_path / "data",
        peer=Peer(chroma_server, peer_database, plugin_db=pg.url),
    )
    side.data_dir.mkdir()
    try:
        assert (await side.peer.read())["ready"]
        yield side
    finally:
        side.peer.kill()
        await coherence.close()
        await side.embedder.close()
        side.connection.close()


def _groups(here: SimpleNamespace) -> Any:
    from amrita_plugin_memory.core.config import ConfigFile
    from amrita_plugin_memory.storage.groups.stores import GroupStores

    groups = GroupStores.build(ConfigFile(), here.coherence)  # as a bot builds them
    groups.self_memory.max_chars = 20
    return groups


async def test_the_anonymisation_switch_changed_elsewhere_is_seen_here(
    here: SimpleNamespace,
) -> None:
    peer, lag = here.peer, here.lag
    groups = _groups(here)
    group = "70001"

    assert await groups.directory.anonymize(group) is True  # the default, now cached here
    assert (await peer.ask(op="anonymize", group=group, value=False))["ok"]
    lag.past_max_lag()
    assert await groups.directory.anonymize(group) is False
    assert (await peer.ask(op="anonymize", group=group, value=True))["ok"]
    lag.past_max_lag()
    assert await groups.directory.anonymize(group) is True


async def test_the_self_memory_changed_elsewhere_is_seen_here(here: SimpleNamespace) -> None:
    peer, lag = here.peer, here.lag
    groups = _groups(here)
    assert await groups.self_memory.texts() == []  # cached here
    assert (await peer.ask(op="self_add", text="我是一个喜欢天文的机器人"))["ok"]  # 12 chars
    lag.past_max_lag()
    assert await groups.self_memory.texts() == ["我是一个喜欢天文的机器人"]
    assert (await peer.ask(op="self_add", text="我住在上海"))["ok"]  # 17 of 20 now
    # Decided on the table as it is (every process's entries), not on a cached list.
    refused = await groups.self_memory.add("我会弹钢琴的")
    assert (refused.ok, refused.current_chars) == (False, 17)
    assert (await peer.ask(op="self_delete", number=1))["deleted"] == "我是一个喜欢天文的机器人"
    lag.past_max_lag()
    assert await groups.self_memory.texts() == ["我住在上海"]  # no longer injected here
    assert (await groups.self_memory.add("我会弹钢琴的")).ok
    assert (await peer.ask(op="self_delete", number=2))["deleted"] == "我会弹钢琴的"


OWNER = "10001"
"""The L3 loop's target user: whose profile it is."""


async def test_the_knowledge_base_and_the_profile_are_one_for_every_process(
    here: SimpleNamespace,
) -> None:
    """A data directory that used files (one machine's disk) is migrated once, with a
    backup; from then on both processes read and change the same entries and profile."""
    from amrita_plugin_memory.subconscious.knowledge_base import (
        KnowledgeBaseManager,
        KnowledgeError,
    )
    from amrita_plugin_memory.subconscious.profile_store import ProfileStore

    peer, data = here.peer, here.data_dir
    collection = "amrita_global_knowledge"  # the default name, as the peer's runtime uses

    def kb(shared: Any) -> Any:
        return KnowledgeBaseManager(
            root=data,
            connection=here.connection,
            embedder=here.embedder,
            collection_name=collection,
            max_chars=4000,
            shared=shared,
        )

    # Before: this machine kept the knowledge and the profile as files.
    local = kb(None)
    old = await local.create("旧知识", "以前写在文件里的", "正文：天文望远镜的口径越大越好")
    await ProfileStore(data).update("insert", start_line=1, content="喜欢观星")
    assert local.path_for(old.kid).exists()

    shared = kb(here.coherence)
    profile = ProfileStore.of(data, here.coherence, OWNER)
    # The first use is the start-up check (as the loop's runner does it): it migrates.
    report = await shared.validate_on_startup()
    assert not report.changed, report  # the vector was written with the file already
    assert [e["kid"] for e in await shared.list()] == [old.kid]
    assert not (data / "knowledge").exists() and not (data / "knowledge_index.json").exists()
    backups = list(data.glob("knowledge.migrated-*"))
    assert len(backups) == 1 and (backups[0] / f"KNOWLEDGE_{old.kid}.md").exists()
    assert (backups[0] / "knowledge_index.json").exists()
    # The first use of the profile is an edit: the file's lines are in the row first.
    await profile.update("insert", start_line=2, content="养了一只猫")
    assert (await profile.read())["lines"] == ["1: 喜欢观星", "2: 养了一只猫"]
    assert not (data / "user_profile.md").exists()
    assert len(list(data.glob("user_profile.md.migrated-*"))) == 1

    # The other process sees the same knowledge, and what it changes is seen here.
    assert (await peer.ask(op="knowledge_list"))["kids"] == [old.kid]
    new = (
        await peer.ask(
            op="knowledge_create",
            title="新知识",
            summary="另一台机器写的",
            body="正文：双筒望远镜适合入门",
        )
    )["kid"]
    assert sorted(e["kid"] for e in await shared.list()) == sorted([old.kid, new])
    assert (await shared.get(new)).body == "正文：双筒望远镜适合入门"
    assert (await peer.ask(op="knowledge_delete", kid=old.kid))["ok"]
    with pytest.raises(KnowledgeError, match="不存在"):
        await shared.get(old.kid)
    await shared.update(new, summary="这台机器改过的")
    assert (await peer.ask(op="knowledge_list"))["kids"] == [new]
    report = await shared.validate_on_startup()  # texts and vectors are in step
    assert not report.changed, report

    assert "喜欢观星" in (await peer.ask(op="profile_text", subject=OWNER))["text"]
    assert (await peer.ask(op="profile_insert", subject=OWNER, content="有一台折射望远镜"))["ok"]
    assert (await profile.read())["lines"] == [
        "1: 有一台折射望远镜",
        "2: 喜欢观星",
        "3: 养了一只猫",
    ]
    await profile.update("delete", start_line=2, end_line=3)
    assert (await peer.ask(op="profile_text", subject=OWNER))["text"] == "---\n有一台折射望远镜\n"
    assert await profile.remove() == 1  # a forget through any process removes it for all
    assert (await peer.ask(op="profile_text", subject=OWNER))["text"] == ""
    await shared.delete(new)
