"""One user's forget points, void points and usage rows on SQLite and PostgreSQL (``orm_db``):
keyed reads whatever the number of other users, a bound on every wait, and the usage
ledger's rows of a user in their export and gone with their forget."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from tests.helpers import user_view

pytestmark = pytest.mark.usefixtures("orm_db")

OTHERS = 2000


@pytest.fixture
def statements() -> Iterator[list[str]]:
    """Every SQL statement run on the plugin's bound engine during the test."""
    from nonebot_plugin_orm import get_session

    from amrita_plugin_memory.storage.models import ForgottenUser

    bind = get_session().get_bind(ForgottenUser)
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        seen.append(statement)

    event.listen(bind, "before_cursor_execute", record)
    yield seen
    event.remove(bind, "before_cursor_execute", record)


async def _many_forgotten(data_dir: Path) -> None:
    """``OTHERS`` forgotten users, in the table and in the file."""
    from sqlalchemy import insert

    from amrita_plugin_memory.storage.models import ForgottenUser
    from amrita_plugin_memory.storage.shared.sessions import orm_session

    at = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [
        {"user_id": str(100000 + n), "partition": f"QQPlatform_Private_{100000 + n}", "at_us": n}
        for n in range(OTHERS)
    ]
    async with orm_session() as session:
        await session.execute(insert(ForgottenUser), rows)
        await session.commit()
    users = {r["user_id"]: {"partition": r["partition"], "at": at.isoformat()} for r in rows}
    document = {"format": "amrita_plugin_memory/forgotten_users", "version": 1, "users": users}
    (data_dir / "forgotten_users.json").write_text(json.dumps(document), encoding="utf-8")


async def test_one_users_void_point_is_a_keyed_read(tmp_path: Path, statements: list[str]) -> None:
    from amrita_plugin_memory.infra.fences import UserEpochs
    from amrita_plugin_memory.storage.shared.sessions import orm_session
    from amrita_plugin_memory.storage.users.fences import UserFences, VoidPoints
    from amrita_plugin_memory.storage.users.tombstones import ForgottenUsers

    await _many_forgotten(tmp_path)
    forgotten = ForgottenUsers.in_dir(tmp_path, orm_session)
    parses = 0
    read = forgotten._read

    def counted() -> dict[str, dict[str, str]]:
        nonlocal parses
        parses += 1
        return read()

    forgotten._read = counted  # type: ignore[method-assign]
    fences = UserFences(UserEpochs(), forgotten, VoidPoints(orm_session))
    at = datetime.now(UTC) - timedelta(minutes=1)
    await forgotten.add("555", "QQPlatform_Private_555", at)
    statements.clear()
    parses = 0
    for _ in range(5):  # every extraction batch, persona run and window flush asks
        points = await fences.void_points(["555", "556"], "active")
        assert points == {"555": pytest.approx(at.timestamp())}
        assert await forgotten.forgotten_at("556") is None
    assert await forgotten.forgotten_at("100007") is not None  # one of the others
    tombstone_reads = [s for s in statements if "amrita_plugin_memory_forgotten_user" in s]
    assert tombstone_reads and all("WHERE" in s and "user_id IN" in s for s in tombstone_reads)
    assert parses <= 1  # the file is parsed again only when it changed
    await forgotten.add("556", "QQPlatform_Private_556", at)
    assert await forgotten.forgotten_at("556") == at
    assert parses <= 3  # the forget's own write reads it, then one lookup


class _Hung:
    """A session that never answers until ``gate`` is set (a database that stopped)."""

    def __init__(self, gate: asyncio.Event) -> None:
        self.gate = gate

    async def __aenter__(self) -> Any:
        await self.gate.wait()
        raise ConnectionError("the database came back too late")

    async def __aexit__(self, *_exc: object) -> bool:
        return False


async def test_void_points_and_the_ledger_wait_with_a_bound() -> None:
    from amrita_plugin_memory.core.calendar import OwnerCalendar
    from amrita_plugin_memory.storage.shared.sessions import SharedDatabaseError, SharedWork
    from amrita_plugin_memory.storage.usage.ledger import UsageLedger
    from amrita_plugin_memory.storage.usage.spend import Spend
    from amrita_plugin_memory.storage.users.fences import VoidPoints

    gate = asyncio.Event()
    work = SharedWork(0.3)
    voids = VoidPoints(lambda: _Hung(gate), work)  # type: ignore[arg-type, return-value]
    hung: Any = lambda: _Hung(gate)  # noqa: E731
    ledger = UsageLedger(OwnerCalendar(), sessions=hung, work=work)
    try:
        async with asyncio.timeout(5):  # without the bound these wait for ever
            with pytest.raises(SharedDatabaseError):
                await voids.of(["1"], "active")
            with pytest.raises(SharedDatabaseError):
                await voids.record("1", "active", 1.0)
            with pytest.raises(SharedDatabaseError):
                await ledger.spent_on("2026-01-01", user_view("1"))
            assert await ledger.add("extraction", "1", Spend(requests=1)) is False  # waits
            assert ledger.pending(ledger.today())
    finally:
        gate.set()
        await work.settle()
        ledger._pending.clear()
        await ledger.close()


async def test_a_users_usage_rows_are_exported_and_forgotten(tmp_path: Path) -> None:
    from amrita_plugin_memory.storage.usage.ledger import UsageLedger
    from amrita_plugin_memory.storage.usage.spend import Spend
    from tests.botproject import make_runtime
    from tests.test_profile_forget import groups

    rt = make_runtime(tmp_path / "data")
    try:
        ledger = rt.usage
        assert isinstance(ledger, UsageLedger)
        assert await ledger.add("extraction", "30471", Spend(requests=1, prompt_tokens=70))
        assert await ledger.add("persona", "30471", Spend(requests=2, prompt_tokens=9))
        assert await ledger.add("extraction", "30472", Spend(requests=1, prompt_tokens=5))
        ledger.count_turn()  # the bot-wide counters (no user) stay
        data = rt.user_data(groups())
        usage = (await data.export("30471"))["usage"]
        assert [(u["feature"], u["prompt_tokens"]) for u in usage] == [
            ("extraction", 70),
            ("persona", 9),
        ]
        assert (await data.preview("30471")).usage_rows == 2
        assert (await data.forget("30471")).usage_rows == 2
        assert await ledger.of_user(user_view("30471")) == []
        assert [u["prompt_tokens"] for u in await ledger.of_user(user_view("30472"))] == [5]
        assert await ledger.flush()
        assert sum(
            s.requests for s in (await ledger.totals_by_day(1)).get(ledger.today(), {}).values()
        )
    finally:
        await rt.close()


async def test_suggestions_taken_over_from_the_published_plugin_go_with_any_forget(
    tmp_path: Path,
) -> None:
    """The published plugin recorded no submitter of a knowledge suggestion: such a
    suggestion may be anyone's, so no export shows it and every forget removes it."""
    from amrita_plugin_memory.storage.published.loop_state import convert_loop_state
    from amrita_plugin_memory.storage.users.loop_state_row import SUGGESTIONS, LoopStateRow
    from tests.botproject import make_runtime
    from tests.test_profile_forget import groups

    published = {"knowledge_suggestions": [{"action": "create", "title": "签到规则"}]}
    converted, _ = convert_loop_state(json.dumps(published))
    mine = {"id": "s-mine", "time": "", "action": "create", "title": "茶", "user_id": "30482"}
    loop = LoopStateRow()
    await loop.edit(lambda state: state.setdefault(SUGGESTIONS, []).extend(
        [*converted[SUGGESTIONS], mine]))  # fmt: skip
    rt = make_runtime(tmp_path / "data")
    try:
        data = rt.user_data(groups(), LoopStateRow())
        titles = [s["title"] for s in (await data.export("30482"))["knowledge_suggestions"]]
        assert titles == ["茶"]  # never someone else's
        assert (await data.export("30481"))["knowledge_suggestions"] == []
        assert (await data.forget("30481")).suggestions == 1
        assert [s["title"] for s in (await loop.read()).get(SUGGESTIONS, [])] == ["茶"]
    finally:
        await rt.close()


async def test_a_bot_without_the_loop_forgets_the_loops_messages_and_abstracts(
    tmp_path: Path,
) -> None:
    """The loop's waiting messages and abstracts belong to its target user, as each row
    records: a forget through a bot without ``target_user_id`` removes them too."""
    from amrita_plugin_memory.storage.users.loop_state_row import (
        ABSTRACTS,
        PENDING,
        LoopStateRow,
    )
    from tests.botproject import make_runtime
    from tests.test_profile_forget import groups

    def cycle(state: dict[str, Any]) -> None:
        state.setdefault(PENDING, []).append({"time": "", "intent": "提醒他周五去读书会"})
        state.setdefault(ABSTRACTS, []).append({"time": "", "cycle": 1, "summary": "整理画像"})

    await LoopStateRow(target="30491").edit(cycle)  # the loop's bot
    rt = make_runtime(tmp_path / "data")  # another bot: no L3, no target_user_id
    try:
        data = rt.user_data(groups())
        assert (await data.export("30492"))["pending_messages"] == []  # not theirs
        doc = await data.export("30491")
        assert [p["intent"] for p in doc["pending_messages"]] == ["提醒他周五去读书会"]
        counts = await data.forget("30491")
        assert (counts.pending_messages, counts.abstracts) == (1, 1)
        state = await LoopStateRow().read()
        assert not state.get(PENDING) and not state.get(ABSTRACTS)
    finally:
        await rt.close()


async def test_a_persona_forget_waits_for_a_merge_in_another_process() -> None:
    """A merge elsewhere that checked its fence before the forget's tombstone holds the
    member's lease until it has written: the forget deletes after it, never before."""
    import time

    from amrita_plugin_memory.core.config import ConfigFile
    from amrita_plugin_memory.storage.groups.stores import GroupStores
    from amrita_plugin_memory.storage.shared.leases import Leases
    from tests.test_profile_forget import shared

    coherence = shared()
    personas = GroupStores.build(ConfigFile(), coherence).personas
    uid = "30501"
    assert await personas.merge(uid, [("爱好", "爬山")], now=time.time(), max_chars=500)
    merging = Leases(scope="t")  # another bot's merge, between its fence and its write
    name = f"{coherence.collection}:persona:{uid}"
    assert await merging.try_take(name, "merge", ttl=60)
    forgetting = asyncio.create_task(personas.forget(uid))
    try:
        await asyncio.sleep(1.0)
        assert not forgetting.done()
    finally:
        await merging.release(name, "merge")
    assert await asyncio.wait_for(forgetting, 30) == 1
    assert (
        await GroupStores.build(ConfigFile(), coherence).personas.of_user_anywhere(uid)
    ).fields == []
