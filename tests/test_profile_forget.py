"""The L3 profile and knowledge texts in the shared database: a forget is final in every
process, on SQLite and PostgreSQL (``orm_db``), in this process.

Two "hosts" share the plugin's tables: each has a data directory of its own and the
same feed and leases (``Coherence`` on the bound database, as remote mode builds it).
The bot that forgets runs no L3 loop and has no ``target_user_id``; the loop's bot is
a ``ProfileStore`` about its target user, as the runner builds it.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.botproject import make_runtime

pytestmark = pytest.mark.usefixtures("orm_db", "embed_server")

OWNER = "30461"
"""The L3 loop's target user (whose profile it is)."""


def shared() -> Any:
    """Remote mode's feed and leases of one process, on the bound database."""
    from amrita_plugin_memory.storage.memory_store import MEMORY_COLLECTION
    from amrita_plugin_memory.storage.shared.coherence import Coherence
    from amrita_plugin_memory.storage.shared.feed import ChangeFeed
    from amrita_plugin_memory.storage.shared.leases import Leases

    return Coherence(MEMORY_COLLECTION, ChangeFeed(f"test:{MEMORY_COLLECTION}"), Leases(scope="t"))


def groups() -> Any:
    from amrita_plugin_memory.core.config import ConfigFile
    from amrita_plugin_memory.storage.groups.stores import GroupStores

    return GroupStores.build(ConfigFile())


def loop_profile(data_dir: Path, coherence: Any, rt: Any) -> Any:
    """The loop's profile on a host whose data dir is ``data_dir`` (as the runner builds it)."""
    from amrita_plugin_memory.subconscious.profile_store import ProfileStore

    data_dir.mkdir(parents=True, exist_ok=True)
    return ProfileStore.of(data_dir, coherence, OWNER, rt.forgotten.forgotten_at)


def old_file(data_dir: Path, text: str, age: float = 3600.0) -> Path:
    """A ``user_profile.md`` written ``age`` seconds ago (before remote mode)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / "user_profile.md"
    path.write_text(text, encoding="utf-8")
    then = time.time() - age
    os.utime(path, (then, then))
    return path


async def test_a_bot_without_the_loop_exports_and_forgets_the_shared_profile(
    tmp_path: Path,
) -> None:
    rt = make_runtime(tmp_path / "bot_b")  # no [subconscious] target_user_id
    coherence = shared()
    rt.store.share(coherence)
    try:
        loop = loop_profile(tmp_path / "bot_a", coherence, rt)
        await loop.update("insert", start_line=1, content="养猫\n住在杭州")
        data = rt.user_data(groups())
        doc = await data.export(OWNER)
        assert doc["l3_profile"] == "---\n养猫\n住在杭州\n"
        assert (await data.preview(OWNER)).profile_lines == 2
        assert (await data.export("30462"))["l3_profile"] is None  # only its subject's

        counts = await data.forget(OWNER)
        assert counts.profile_lines == 2
        assert await loop.text() == "" and not await loop.exists()
        assert (await data.export(OWNER))["l3_profile"] is None
    finally:
        await rt.close()


async def test_a_removal_waits_for_an_edit_in_flight_in_another_process(tmp_path: Path) -> None:
    """An edit holds the profile's lease between its read and its write; a forget through
    another bot waits for it, so the edit cannot write the forgotten profile back."""
    from amrita_plugin_memory.storage.shared.leases import Leases

    rt = make_runtime(tmp_path / "bot_b")
    coherence = shared()
    rt.store.share(coherence)
    try:
        loop = loop_profile(tmp_path / "bot_a", coherence, rt)
        await loop.update("insert", start_line=1, content="喜欢爬山")
        editor = Leases(scope="t")  # another process's edit, between its read and its write
        name = f"{coherence.collection}:document:profile:"
        assert await editor.try_take(name, "editor", ttl=60)
        forgetting = asyncio.create_task(rt.user_data(groups()).forget(OWNER))
        await asyncio.sleep(1.0)
        assert not forgetting.done()
        assert "喜欢爬山" in await loop.text()  # not removed under the edit
        await editor.release(name, "editor")
        assert (await asyncio.wait_for(forgetting, 30)).profile_lines == 1
        assert await loop.text() == ""
    finally:
        await rt.close()


async def test_another_hosts_old_file_never_brings_a_forgotten_profile_back(
    tmp_path: Path,
) -> None:
    rt = make_runtime(tmp_path / "bot_b")
    coherence = shared()
    rt.store.share(coherence)
    try:
        old_file(tmp_path / "host_a", "旧摘要\n---\n主机甲的旧画像\n")
        stale = old_file(tmp_path / "host_c", "---\n主机丙的旧画像\n")
        host_a = loop_profile(tmp_path / "host_a", coherence, rt)
        assert "主机甲的旧画像" in await host_a.text()  # the store's first import
        assert len(list((tmp_path / "host_a").glob("user_profile.md.migrated-*"))) == 1

        counts = await rt.user_data(groups()).forget(OWNER)
        assert counts.profile_lines == 2
        # Host C starts its loop after the forget: its file is older than the forget.
        host_c = loop_profile(tmp_path / "host_c", coherence, rt)
        assert await host_c.text() == ""
        assert not stale.exists()
        assert not list((tmp_path / "host_c").glob("user_profile.md*"))  # deleted, no copy

        # Host D's file is newer than the forget, but the store imported once already:
        # it is kept as a backup only.
        newer = old_file(tmp_path / "host_d", "---\n主机丁的画像\n", age=-60)
        host_d = loop_profile(tmp_path / "host_d", coherence, rt)
        assert await host_d.text() == ""
        assert not newer.exists()
        assert len(list((tmp_path / "host_d").glob("user_profile.md.migrated-*"))) == 1
    finally:
        await rt.close()


async def test_a_forget_in_the_loops_process_removes_every_file_copy(tmp_path: Path) -> None:
    """The one-time import left ``user_profile.md.migrated-<time>``: a forget of the
    profile's subject removes it with the row (and counts what it removed)."""
    rt = make_runtime(tmp_path / "host_a")
    coherence = shared()
    rt.store.share(coherence)
    try:
        old_file(tmp_path / "host_a", "---\n第一行\n第二行\n")
        loop = loop_profile(tmp_path / "host_a", coherence, rt)
        assert await loop.exists()
        assert list((tmp_path / "host_a").glob("user_profile.md.migrated-*"))
        data = rt.user_data(groups())
        data.profile = loop  # the loop runs here (``adapters.subconscious.bind_user_data``)
        assert (await data.forget(OWNER)).profile_lines == 2
        assert not list((tmp_path / "host_a").glob("user_profile.md*"))
        assert not await loop.exists()
    finally:
        await rt.close()


async def test_another_hosts_old_knowledge_folder_never_brings_a_deleted_entry_back(
    tmp_path: Path,
) -> None:
    from amrita_plugin_memory.storage.shared.documents import SharedDocuments
    from amrita_plugin_memory.subconscious.knowledge_docs import KnowledgeFiles, KnowledgeRows
    from amrita_plugin_memory.subconscious.knowledge_entry import KnowledgeEntry

    coherence = shared()
    old = KnowledgeEntry("k0000001", "旧知识", "摘要", "正文")

    def host(name: str) -> Any:
        files = KnowledgeFiles(tmp_path / name, lambda _line: None)
        return files, KnowledgeRows(SharedDocuments("knowledge", coherence), files, print)

    files_a, rows_a = host("a")
    files_c, rows_c = host("c")
    await files_a.save(old)  # both hosts had the entry as a file before remote mode
    await files_c.save(old)
    assert list(await rows_a.index()) == [old.kid]  # the store's first import
    await rows_a.remove(old.kid)  # an operator deleted it
    assert await rows_c.index() == {}  # host C's first use: backed up, not imported
    assert not files_c.dir.exists()
    assert list((tmp_path / "c").glob("knowledge.migrated-*"))
