"""Deletes lose nothing, and neither deletes nor the sweep lose what another process changed.

Every delete moves the memory into the archive (reason ``deleted``, same id and
vector, restorable); only ``MemoryStore.erase`` (forget) removes data. Another
bot process on the same Chroma server has locks of its own: "another process"
here is a second :class:`MemoryStore` on the same collection (its own partition
locks and write gate), whose write lands between the sweep's (or a delete's)
read and its delete: right after the archive row is saved.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

# The archive tests' helpers; their autouse ``drop_archive`` cleans the shared remote server here too.
from tests.helpers import new_memory, view_of
from tests.lazy import lazy_import
from tests.reliability_stats import STATS
from tests.test_archive import (
    ALICE,
    BOB,
    NOW,
    days_ago,
    drop_archive,  # noqa: F401
    lifetime,
    stored_vector,
)

A = lazy_import(
    "amrita_plugin_memory.storage.memory_store",
    "amrita_plugin_memory.upkeep.archive.restore",
    "amrita_plugin_memory.upkeep.archive.view",
    "amrita_plugin_memory.upkeep.archive.sweep",
    "amrita_plugin_memory.core.config",
    "amrita_plugin_memory.core.calendar",
    "amrita_plugin_memory.core.errors",
)


def another_process(store: Any) -> Any:
    """A second store on the same collection: its own locks, like another bot process."""
    other = A.MemoryStore(store.connection, store.embedder, name=store.name)
    other.index.ttl = 0.0
    return other


def after_first_archive_save(store: Any, meanwhile: Callable[[], Awaitable[Any]]) -> list[Any]:
    """Run ``meanwhile`` once, right after ``store`` first saves a row into its archive
    (after its read, before its live delete); what it returned is appended to the list."""
    original = store.archive.save
    done: list[Any] = []

    async def save(*args: Any, **kwargs: Any) -> None:
        await original(*args, **kwargs)
        if not done:
            done.append(await meanwhile())

    store.archive.save = save
    return done


# ---------------------------------------------------------------------------
# A delete keeps the memory
# ---------------------------------------------------------------------------


async def test_delete_keeps_the_memory_and_restore_brings_it_back(store: Any) -> None:
    rec = await store.add(
        new_memory(ALICE, "user", "用户养了一只叫团子的猫", tags=["宠物"], importance="high")
    )
    vector = await stored_vector(store, rec.id)
    assert await store.count(view_of(ALICE)) == 1  # warms the cached count

    assert await store.delete(ALICE, rec.id) is True

    assert (
        await store.get(view_of(ALICE), rec.id) is None and await store.count(view_of(ALICE)) == 0
    )
    got = await store.archive.get(rec.id, with_vector=True)
    assert got is not None, "the deleted memory is not in the archive"
    row, archived_vector = got
    assert (row.reason, row.is_version, row.record.content) == ("deleted", False, rec.content)
    assert (row.record.tags, row.record.importance, row.record.partition) == (
        ["宠物"],
        "high",
        ALICE,
    )
    assert archived_vector == vector  # copied, not re-embedded
    assert "[已删除，归档于" in A.describe_row(row, A.OwnerCalendar())

    done = await A.restore(store, rec.id, partition=ALICE, limit=10)
    back = await store.get(view_of(ALICE), rec.id)
    assert done.describe() == f"已恢复记忆 {rec.id}"
    assert back is not None and (back.content, back.created_at) == (rec.content, rec.created_at)
    assert await stored_vector(store, rec.id) == vector
    assert await store.archive.count_all() == 0
    hits = await store.query(view_of(ALICE), "团子", top_k=1)
    assert [h.id for h in hits] == [rec.id]


async def test_a_delete_of_another_partitions_memory_archives_nothing(store: Any) -> None:
    rec = await store.add(new_memory(BOB, "user", "Bob 的秘密"))
    assert await store.delete(ALICE, rec.id) is False
    assert await store.delete(ALICE, "no-such-id") is False
    assert await store.get(view_of(BOB), rec.id) is not None
    assert await store.archive.count_all() == 0


async def test_a_delete_that_cannot_archive_deletes_nothing(store: Any) -> None:
    """The archive refuses writes (a remap marker on it): the delete is refused too."""
    rec = await store.add(new_memory(ALICE, "user", "用户住在上海"))
    archive = await store.connection.get_collection(store.archive.name, create=True)
    await store.connection.run(lambda: archive.modify(metadata={"reembed_running": "test"}))
    STATS.faults_injected += 1
    with pytest.raises(A.MaintenanceInProgress):
        await store.delete(ALICE, rec.id)
    got = await store.get(view_of(ALICE), rec.id)
    if got is None:
        STATS.items_lost += 1
    assert got is not None and got.content == "用户住在上海"


# ---------------------------------------------------------------------------
# Another process changes a memory while it is being swept or deleted
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("other_keeps_history", [True, False])
async def test_the_sweep_leaves_a_memory_another_process_changed_meanwhile(
    store: Any, other_keeps_history: bool
) -> None:
    store.clock = lambda: days_ago(100)
    old = await store.add(new_memory(ALICE, "user", "用户住在上海", importance="medium"))
    gone = await store.add(new_memory(BOB, "user", "Bob 很久以前的事", importance="medium"))
    store.clock = lambda: NOW.isoformat(timespec="seconds")
    other = another_process(store)
    other.keep_versions = other_keeps_history
    other.clock = lambda: NOW.isoformat(timespec="seconds")
    new_vector = (await store.embedder.embed(["用户搬到北京了"]))[0]
    changed = after_first_archive_save(
        store,
        lambda: other.update(ALICE, old.id, content="用户搬到北京了", stored_vector=new_vector),
    )

    result = await A.sweep(store, lifetime, batch_size=10, now=NOW)

    assert changed and changed[0] is not None, "the other process's update did not run"
    STATS.faults_injected += 1
    live = await store.get(view_of(ALICE), old.id)
    if live is None or live.content != "用户搬到北京了":
        STATS.items_lost += 1
    assert live is not None and live.content == "用户搬到北京了"
    assert (result.archived, result.skipped) == (1, 1)
    assert await store.get(view_of(BOB), gone.id) is None
    # The swept row of the changed memory became its previous version, once.
    assert await store.archive.ids([old.id, gone.id]) == {gone.id}
    versions = await store.archive.list(view_of(ALICE), memory_id=old.id)
    assert [(v.record.content, v.reason, v.is_version) for v in versions] == [
        ("用户住在上海", "updated", True)
    ]
    again = await A.sweep(store, lifetime, now=NOW)
    assert (again.archived, await store.get(view_of(ALICE), old.id) is not None) == (0, True)


async def test_a_delete_archives_what_another_process_wrote_meanwhile(store: Any) -> None:
    # ``updated_at`` counts seconds: the memory was written before this second.
    store.clock = lambda: days_ago(1)
    rec = await store.add(new_memory(ALICE, "user", "用户喜欢蓝色"))
    other = another_process(store)
    new_vector = (await store.embedder.embed(["用户喜欢红色"]))[0]
    changed = after_first_archive_save(
        store, lambda: other.update(ALICE, rec.id, content="用户喜欢红色", stored_vector=new_vector)
    )

    assert await store.delete(ALICE, rec.id) is True

    assert changed and changed[0] is not None
    STATS.faults_injected += 1
    assert await store.get(view_of(ALICE), rec.id) is None
    rows = {
        (r.record.content, r.reason) for r in await store.archive.list(view_of(ALICE), limit=10)
    }
    if ("用户喜欢红色", "deleted") not in rows:
        STATS.items_lost += 1
    # The memory as last written is the deleted row; the text before, a version.
    assert rows == {("用户喜欢红色", "deleted"), ("用户喜欢蓝色", "updated")}
    got = await store.archive.get(rec.id, with_vector=True)
    assert got is not None and got[1] == pytest.approx(new_vector, abs=1e-6)


async def test_an_update_racing_a_delete_of_another_process_is_refused(store: Any) -> None:
    """Chroma drops an update of a missing id silently: the update says so instead."""
    if store.connection.mode != "remote":
        pytest.skip("a local store belongs to one process")
    rec = await store.add(new_memory(ALICE, "user", "用户在学吉他"))
    other = another_process(store)
    deleted = after_first_archive_save(store, lambda: other.delete(ALICE, rec.id))
    STATS.faults_injected += 1

    with pytest.raises(A.VectorStoreError, match="刚被另一个进程移入归档，修改未生效"):
        await store.update(ALICE, rec.id, content="用户在学钢琴")

    assert deleted == [True]
    rows = {
        (r.record.content, r.reason) for r in await store.archive.list(view_of(ALICE), limit=10)
    }
    assert ("用户在学吉他", "deleted") in rows
    assert await store.get(view_of(ALICE), rec.id) is None
