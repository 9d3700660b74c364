"""Partition keys follow Amrita's make_uni_id; stored legacy keys migrate once."""

from __future__ import annotations

from typing import Any

import pytest

from tests.events import group_event, private_event
from tests.helpers import new_memory, view_of
from tests.lazy import lazy_import

K = lazy_import(
    "amrita_plugin_memory.storage.keys",
    "amrita_plugin_memory.adapters.events",
    "amrita_plugin_memory.upkeep.rekey",
)


def test_keys_delegate_to_amrita() -> None:
    from amrita.plugins.chat.utils.sql import make_uni_id

    assert K.user_key(10001) == make_uni_id("10001", is_group=False) == "QQPlatform_Private_10001"
    assert K.group_key("20002") == make_uni_id(20002, is_group=True) == "QQPlatform_Group_20002"
    assert K.current_key_format() == "QQPlatform_Private_{id}|QQPlatform_Group_{id}"


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("user_10001", "QQPlatform_Private_10001"),
        ("group_20002", "QQPlatform_Group_20002"),
        ("QQPlatform_Private_10001", "QQPlatform_Private_10001"),
        ("QQPlatform_Group_20002", "QQPlatform_Group_20002"),
        ("garbage", None),
        ("user_abc", None),
        ("", None),
    ],
)
def test_normalize_reads_legacy_and_current(key: str, expected: str | None) -> None:
    assert K.normalize_key(key) == expected


def test_group_detection() -> None:
    assert K.parse_key("group_1") == ("group", 1) and K.parse_key("QQPlatform_Group_1") == (
        "group",
        1,
    )
    assert K.parse_key("user_1") == ("user", 1) and K.parse_key("nonsense") is None


def test_target_from_private_event() -> None:
    target = K.target_from_event(private_event(10001, "hi"))
    assert (target.user, target.group, target.session, target.is_group) == (
        "QQPlatform_Private_10001",
        None,
        "QQPlatform_Private_10001",
        False,
    )


def test_target_from_group_event() -> None:
    from amrita.plugins.chat.utils.sql import get_uni_user_id

    ev = group_event(10001, 20002, "hi")
    target = K.target_from_event(ev)
    assert target.user == "QQPlatform_Private_10001"
    assert target.group == "QQPlatform_Group_20002"
    # The session key is exactly Amrita's own session id for the event.
    assert target.session == get_uni_user_id(ev)
    assert K.target_from_ids(10001, 20002) == target


async def test_migration_rewrites_legacy_keys_once(store: Any) -> None:
    legacy_user = await store.add(new_memory("user_10001", "user", "旧格式个人记忆"))
    legacy_group = await store.add(new_memory("group_20002", "group", "旧格式群记忆"))
    current = await store.add(new_memory("QQPlatform_Private_10003", "user", "新格式记忆"))
    odd = await store.add(new_memory("not-a-key", "user", "无法解析的键"))
    # An archived version under the legacy key follows its partition too.
    await store.update("user_10001", legacy_user.id, content="旧格式个人记忆（改）")
    [version] = await store.archive.list(view_of("user_10001"))

    dry = await K.migrate_partition_keys(store, dry_run=True, page_size=2)
    assert (dry.scanned, dry.rewritten, dry.unparsable, dry.skipped) == (4, 2, 1, False)
    assert await store.get(view_of("user_10001"), legacy_user.id) is not None  # untouched
    assert await store.get_meta(K.KEY_FORMAT_META) is None

    report = await K.migrate_partition_keys(store, page_size=2)
    assert (report.scanned, report.rewritten, report.unparsable) == (4, 2, 1)
    assert await store.get(view_of("user_10001"), legacy_user.id) is None
    moved = await store.get(view_of("QQPlatform_Private_10001"), legacy_user.id)
    assert moved is not None and moved.content == "旧格式个人记忆（改）"
    assert await store.archive.list(view_of("user_10001")) == []
    [kept] = await store.archive.list(view_of("QQPlatform_Private_10001"))
    assert kept.id == version.id and kept.record.content == "旧格式个人记忆"
    assert (
        await store.get(view_of("QQPlatform_Group_20002"), legacy_group.id)
    ).content == "旧格式群记忆"
    assert (await store.get(view_of("QQPlatform_Private_10003"), current.id)) is not None
    assert (await store.get(view_of("not-a-key"), odd.id)) is not None  # never lost
    assert await store.get_meta(K.KEY_FORMAT_META) == K.current_key_format()

    again = await K.migrate_partition_keys(store)
    assert again.skipped and again.scanned == 0


async def test_migration_on_empty_collection_records_format(store: Any) -> None:
    report = await K.migrate_partition_keys(store)
    assert report.scanned == 0 and not report.skipped
    assert await store.get_meta(K.KEY_FORMAT_META) == K.current_key_format()
