"""Several processes on one database: the memo, opt-out and persona caches stay coherent (#30 §2).

Two stacks (``A``, ``B``) as two bot processes have them: each its own store on
one real ``chroma run`` (the ``pair`` fixture of ``tests/test_coherence.py``), its
own change feed, and its own memo service, consent store and group stores
(personas, windows, labels), all on the session's SQLite through the ORM. ``B``
reads first (its caches fill), ``A`` changes the data, and ``B``'s next read,
whose feed clock is moved past ``MAX_LAG`` (:class:`tests.test_coherence.Lag`, no sleeping), must show the
change: a read never trusts a cache older than that, so within a second.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import env_for
from tests.helpers import new_memory, user_view, view_of
from tests.test_coherence import Lag, Peer, pair, peer, peer_database

__all__ = ["pair", "peer", "peer_database"]  # the fixtures, imported for pytest


@dataclass
class Side:
    store: Any
    memo: Any
    consent: Any
    groups: Any


def _side(store: Any) -> Side:
    from amrita_plugin_memory.core.config import ConfigFile
    from amrita_plugin_memory.storage.consent_store import ConsentStore
    from amrita_plugin_memory.storage.groups.stores import GroupStores
    from amrita_plugin_memory.storage.memo_store import MemoService

    memo = MemoService(500)
    memo.share(store.coherence)  # as MemoryRuntime does in remote mode
    consent = ConsentStore()
    consent.share(store.coherence)
    return Side(store, memo, consent, GroupStores.build(ConfigFile(), store.coherence))


@pytest.fixture
async def sides(pair: list[Any]) -> tuple[Side, Side]:
    """``A`` and ``B``, their feeds started and past the rows written before (a feed's
    first polls re-read the newest rows: settled here, not during a test's reads)."""
    out = _side(pair[0]), _side(pair[1])
    for side in out:
        await side.store.fresh()
        await side.store.coherence.feed.poll()
    return out


def _user() -> tuple[str, str]:
    """A fresh user id and their personal partition (the tests share one SQLite)."""
    from amrita_plugin_memory.storage.keys import user_key

    user = str(40000 + uuid.uuid4().int % 1_000_000)
    return user, user_key(user)


async def test_a_memo_updated_through_a_is_read_by_b(sides: tuple[Side, Side]) -> None:
    a, b = sides
    lag = Lag(b.store)
    _, key = _user()
    _, other = _user()
    assert (await a.memo.update(key, "用户叫小明")).ok
    assert await b.memo.get(view_of(key)) == "用户叫小明"
    assert await b.memo.get(view_of(other)) == ""  # an empty memo is cached too
    assert b.memo.cached(key) and b.memo.cached(other)

    assert (await a.memo.update(key, "用户叫小红")).ok
    lag.past_max_lag()
    assert await b.memo.get(view_of(key)) == "用户叫小红"
    assert b.memo.cached(other)  # only the changed uni_id was dropped
    # A's own cache followed its own write (no feed row of its own is applied).
    assert a.memo.cached(key) and await a.memo.get(view_of(key)) == "用户叫小红"


async def test_the_background_poll_drops_bs_memo_without_a_read(
    sides: tuple[Side, Side],
) -> None:
    a, b = sides
    _, key = _user()
    assert (await a.memo.update(key, "第一版")).ok
    assert await b.memo.get(view_of(key)) == "第一版"  # starts B's poller, caches the memo
    seen = asyncio.Event()
    b.store.coherence.feed.follow(lambda partition: seen.set(), seen.set)
    assert (await a.memo.update(key, "第二版")).ok
    async with asyncio.timeout(10):  # hang guard
        await seen.wait()
    assert not b.memo.cached(key)
    assert await b.memo.get(view_of(key)) == "第二版"


async def test_a_forget_through_a_leaves_nothing_of_the_user_in_bs_caches(
    sides: tuple[Side, Side], tmp_path: Path
) -> None:
    from amrita_plugin_memory.core.calendar import OwnerCalendar
    from amrita_plugin_memory.storage.shared.sessions import orm_session
    from amrita_plugin_memory.storage.users.loop_state_row import LoopStateRow
    from amrita_plugin_memory.storage.users.tombstones import ForgottenUsers
    from amrita_plugin_memory.upkeep.users.user_data import UserData

    a, b = sides
    lag = Lag(b.store)
    user, key = _user()
    other, other_key = _user()
    assert (await a.memo.update(key, "用户的生日是五月一日")).ok
    assert (await a.memo.update(other_key, "另一位用户的备忘录")).ok
    await a.groups.personas.merge(user, [("兴趣", "登山")], now=time.time(), max_chars=700)
    await a.store.add(new_memory(key, "user", "用户住在杭州"))
    # B injects all of it into its prompts, from its caches.
    assert await b.memo.get(view_of(key)) == "用户的生日是五月一日"
    assert await b.memo.get(view_of(other_key)) == "另一位用户的备忘录"
    assert [f.value for f in (await b.groups.personas.of_user_anywhere(user)).fields] == ["登山"]
    assert b.groups.personas.cached(user)
    assert await b.consent.allows(user_view(user))

    group = str(50000 + uuid.uuid4().int % 1_000_000)
    b.groups.windows.append(group, user, "小明", "我的手机号是 138", is_bot=False, at=time.time())
    b.groups.windows.append(group, other, "小红", "大家好", is_bot=False, at=time.time())
    await b.groups.windows.flush(group)  # B's group: the messages are stored and in memory
    assert user in await b.groups.directory.labels(group, [user, other])
    assert group in b.groups.directory._labels

    data = UserData(
        a.store,
        a.memo,
        a.groups,
        calendar=OwnerCalendar(),
        forgotten=ForgottenUsers.in_dir(tmp_path / "a", orm_session),
        loop=LoopStateRow(),
        consent=a.consent,
    )
    counts = await data.forget(user)
    assert (counts.memo, counts.persona_fields, counts.memories) == (1, 1, 1)

    lag.past_max_lag()
    assert await b.memo.get(view_of(key)) == ""
    assert (await b.groups.personas.of_user_anywhere(user)).fields == []
    assert [r.content for r in await b.store.query(view_of(key), "杭州", top_k=5)] == []
    assert await b.memo.get(view_of(other_key)) == "另一位用户的备忘录"
    # The window B holds in memory (shown in B's group prompts) lost their messages,
    # the other member's stay; B's cached labels of the group are read again.
    assert [e.user_id for e in await b.groups.windows.recent_any(group, 10)] == [other]
    assert group not in b.groups.directory._labels
    assert await b.groups.directory.labels_of(user) == {}
    # Their opt-out choice is kept by a forget (none here): B still asks the table's truth.
    assert await b.consent.allows(user_view(user))


async def test_auto_off_through_a_stops_b(sides: tuple[Side, Side]) -> None:
    a, b = sides
    lag = Lag(b.store)
    user, _ = _user()
    bystander, _ = _user()
    assert await b.consent.allows(user_view(user)) and await b.consent.allows(
        user_view(bystander)
    )  # cached

    assert await a.consent.set_allowed(user_view(user), False)
    lag.past_max_lag()
    assert not await b.consent.allows(user_view(user))
    assert await b.consent.allows(user_view(bystander))
    # The fence of B's background work reads the row itself, feed or not.
    assert not await b.consent.allows_now(user_view(user))
    # B's own switch back is seen by A.
    assert await b.consent.set_allowed(user_view(user), True)
    Lag(a.store).past_max_lag()
    assert await a.consent.allows(user_view(user))
    assert not await a.consent.set_allowed(user_view(user), True)  # nothing to change


async def test_persona_off_through_a_drops_bs_persona(sides: tuple[Side, Side]) -> None:
    a, b = sides
    lag = Lag(b.store)
    user, _ = _user()
    await b.groups.personas.merge(user, [("职业", "厨师")], now=time.time(), max_chars=700)
    assert [f.value for f in (await b.groups.personas.of_user_anywhere(user)).fields] == ["厨师"]

    await a.groups.personas.set_learning(user, False)  # /memory persona off through A
    lag.past_max_lag()
    persona = await b.groups.personas.of_user_anywhere(user)
    assert persona.fields == [] and persona.learning_off


async def test_a_failed_poll_clears_bs_memo_cache(sides: tuple[Side, Side]) -> None:
    a, b = sides
    _, key = _user()
    assert (await a.memo.update(key, "内容")).ok
    assert await b.memo.get(view_of(key)) == "内容"
    feed = b.store.coherence.feed

    def broken() -> Any:
        raise RuntimeError("database unreachable")

    sessions, feed.sessions = feed.sessions, broken
    try:
        assert not await feed.poll()
    finally:
        feed.sessions = sessions
    assert not b.memo.cached(key)


async def test_a_memo_and_an_opt_out_changed_here_are_seen_by_another_os_process(
    peer: Peer, chroma_server: Any, peer_database: str
) -> None:
    """``tests/coherence_peer.py``: a real second process with the plugin's runtime (its
    ``MemoService`` and ``ConsentStore`` wired by ``MemoryRuntime``, remote mode)."""
    from amrita_plugin_memory.storage.consent_store import ConsentStore
    from amrita_plugin_memory.storage.memo_store import MemoService
    from amrita_plugin_memory.storage.memory_store import MEMORY_COLLECTION
    from amrita_plugin_memory.storage.shared.coherence import Coherence

    assert (await peer.read())["ready"]
    env = env_for("remote", chroma_server, vector_db_database=peer_database)
    coherence = Coherence.remote(env, MEMORY_COLLECTION)  # this process's, as the runtime's
    memo, consent = MemoService(500), ConsentStore()
    memo.share(coherence)
    consent.share(coherence)
    user, key = _user()
    try:
        assert (await memo.update(key, "旧的备忘录")).ok
        assert (await peer.ask(op="memo", key=key, poll=True))["text"] == "旧的备忘录"
        assert (await peer.ask(op="allows", user=user, poll=True))["allows"] is True

        assert (await memo.update(key, "新的备忘录")).ok
        assert await consent.set_allowed(user_view(user), False)
        # One poll of the peer's feed (what its reads do after MAX_LAG, its poller every
        # 0.25 s) drops both from its caches.
        assert (await peer.ask(op="memo", key=key, poll=True))["text"] == "新的备忘录"
        assert (await peer.ask(op="allows", user=user))["allows"] is False
    finally:
        await coherence.close()
