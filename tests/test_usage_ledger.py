"""The usage ledger and the ``[budget]`` caps on a real database (SQLite and PostgreSQL).

Each test gets a fresh database made by the plugin's migrations (the ``orm_db``
fixture: ``SQLALCHEMY_BINDS`` as a bot has it). The ledger's clock is fixed, so
a test never depends on the hour it runs at; "the next day" is the clock moved
on. ``tests/coherence_peer.py`` is a second OS process on the same database, adding
to the same rows at the same time and asking its budget what this process spent.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import captured_logs
from tests.helpers import user_view
from tests.lazy import lazy_import
from tests.peer_process import PeerProcess, peer_init

U = lazy_import(
    "amrita_plugin_memory.storage.usage",
    "amrita_plugin_memory.storage.usage.ledger",
    "amrita_plugin_memory.core.config",
    "amrita_plugin_memory.core.calendar",
)

ROOT = Path(__file__).resolve().parent.parent
NOON = datetime(2031, 3, 14, 12, 0, tzinfo=timezone(timedelta(hours=8)))
"""The ledger's "now" in these tests (a day no other test writes)."""


class Clock:
    def __init__(self, now: datetime = NOON) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def shanghai(clock: Callable[[], datetime]) -> Any:
    """The owner's calendar of these tests (``[memory] timezone = "Asia/Shanghai"``) on ``clock``."""
    from zoneinfo import ZoneInfo

    return U.OwnerCalendar(ZoneInfo("Asia/Shanghai"), clock)


class CountingSessions:
    """The ORM's sessions, counted (how many times the ledger went to the database)."""

    def __init__(self) -> None:
        from amrita_plugin_memory.storage.shared.sessions import orm_session

        self.inner = orm_session
        self.opened = 0
        self.down = False

    def __call__(self) -> Any:
        self.opened += 1
        if self.down:
            raise ConnectionRefusedError("database down (test)")
        return self.inner()


@pytest.fixture
def sessions() -> CountingSessions:
    return CountingSessions()


@pytest.fixture
def ledger(orm_db: str, sessions: CountingSessions) -> Any:
    return U.UsageLedger(shanghai(Clock()), sessions=sessions)


def spend(prompt: int, completion: int, cached: int = 0) -> Any:
    return U.Spend(
        requests=1, prompt_tokens=prompt, completion_tokens=completion, cached_tokens=cached
    )


# ---------------------------------------------------------------------------
# What one request cost
# ---------------------------------------------------------------------------


def test_the_providers_usage_is_taken_with_its_cached_share() -> None:
    from amrita_core.types.response import UniResponseUsage

    def usage(**extra: Any) -> Any:
        return UniResponseUsage(prompt_tokens=100, completion_tokens=20, total_tokens=120, **extra)

    plain = U.spend_of(usage(), sent=["很长的请求"], answer="回答")
    assert (plain.requests, plain.prompt_tokens, plain.completion_tokens) == (1, 100, 20)
    assert (plain.cached_tokens, plain.estimated) == (0, 0)
    # amrita-core's own field (its Anthropic adapter), OpenAI's and DeepSeek's as extras.
    assert U.spend_of(usage(cache_hit=64), sent=[], answer="").cached_tokens == 64
    openai = usage(prompt_tokens_details={"cached_tokens": 48})
    assert U.spend_of(openai, sent=[], answer="").cached_tokens == 48
    deepseek = usage(prompt_cache_hit_tokens=32, prompt_cache_miss_tokens=68)
    assert U.spend_of(deepseek, sent=[], answer="").cached_tokens == 32
    # Never more than the prompt, never negative or of a wrong type.
    assert U.spend_of(usage(cache_hit=500), sent=[], answer="").cached_tokens == 100
    assert U.spend_of(usage(prompt_cache_hit_tokens="x"), sent=[], answer="").cached_tokens == 0


def test_a_request_without_usage_is_estimated_from_its_characters() -> None:
    from amrita_core.types.response import UniResponseUsage

    assert U.estimate_tokens("") == 0
    assert U.estimate_tokens("你好世界") == 3  # 4 × 0.6, rounded up
    assert U.estimate_tokens("hello world") == 4  # 11 × 0.3, rounded up
    assert U.estimate_tokens("我在 Tencent 上班") == 6  # 4 × 0.6 + 9 × 0.3 = 5.1
    sent = ["系统说明" * 50, "用户：我养了一只猫"]
    for missing in (None, UniResponseUsage(prompt_tokens=0, completion_tokens=0, total_tokens=0)):
        guessed = U.spend_of(missing, sent=sent, answer='{"memories": []}')
        assert guessed.estimated == 1 and guessed.requests == 1
        assert guessed.prompt_tokens == U.estimate_tokens(sent[0]) + U.estimate_tokens(sent[1])
        assert guessed.completion_tokens == U.estimate_tokens('{"memories": []}')
        assert guessed.cached_tokens == 0


# ---------------------------------------------------------------------------
# Increments
# ---------------------------------------------------------------------------


async def test_increments_from_many_tasks_at_once_all_count(ledger: Any) -> None:
    results = await asyncio.gather(
        *(ledger.add("extraction", "10001", spend(11, 7, 4)) for _ in range(60)),
        *(ledger.add("persona", "10002", spend(5, 1)) for _ in range(15)),
    )
    assert all(results)
    days = await ledger.totals_by_day(30)
    today = days[NOON.date().isoformat()]
    assert today["extraction"] == U.Spend(60, 660, 420, 240, 0, 0)
    assert today["persona"] == U.Spend(15, 75, 15, 0, 0, 0)
    assert await ledger.spent_on(NOON.date().isoformat(), user_view("10001")) == (
        660 + 420 + 90,
        1080,
    )


async def test_block_counters_never_go_to_the_database_until_flushed(
    ledger: Any, sessions: CountingSessions
) -> None:
    ledger.tools_chars = lambda: 3304
    for _ in range(4):
        ledger.count_turn()
    ledger.count_block("memo", 240)
    ledger.count_block("memories", 400)
    ledger.count_block("memories", 444)
    ledger.count_block("memories", 0)  # nothing was injected: not a turn with the block
    assert sessions.opened == 0  # a chat turn never waits on the database
    assert await ledger.flush()
    assert sessions.opened > 0
    report = await U.usage_json(U.BackgroundBudget(U.BudgetConfig(), ledger))
    blocks = report["blocks"]["today"]
    assert blocks["turns"] == 4
    assert blocks["tools"] == {"turns": 4, "chars": 4 * 3304, "chars_per_turn": 3304}
    assert blocks["memo"] == {"turns": 1, "chars": 240, "chars_per_turn": 60}
    assert blocks["memories"] == {"turns": 2, "chars": 844, "chars_per_turn": 211}
    assert blocks["group_context"] == {"turns": 0, "chars": 0, "chars_per_turn": 0}


async def test_entries_wait_in_memory_while_the_database_is_down(
    ledger: Any, sessions: CountingSessions
) -> None:
    sessions.down = True
    with captured_logs("WARNING") as lines:
        assert not await ledger.add("extraction", "10001", spend(11, 7))
        assert not await ledger.add("extraction", "10001", spend(11, 7))
    assert sum("写入用量记录失败" in line for line in lines) == 1  # once per outage
    day = NOON.date().isoformat()
    assert ledger.pending_spent(day, user_view("10001")) == (36, 36)
    sessions.down = False
    with captured_logs("INFO") as lines:
        assert await ledger.flush()
    assert any("用量记录已恢复写入" in line for line in lines)
    assert (await ledger.totals_by_day(1))[day]["extraction"] == U.Spend(2, 22, 14, 0, 0, 0)
    assert ledger.pending(day) == {}
    await ledger.close()


async def test_rows_older_than_the_kept_days_are_pruned(ledger: Any) -> None:
    long_ago = NOON - timedelta(days=U.KEEP_DAYS + 1)
    ledger.calendar.clock.now = long_ago
    await ledger.add("extraction", "10001", spend(1, 1))
    ledger.calendar.clock.now = NOON  # the first write of a new day prunes
    await ledger.add("extraction", "10001", spend(2, 2))
    days = await ledger.totals_by_day(U.KEEP_DAYS + 5)
    assert set(days) == {NOON.date().isoformat()}, sorted(days)


# ---------------------------------------------------------------------------
# The caps
# ---------------------------------------------------------------------------


def budget_of(ledger: Any, *, day: int = 0, user: int = 0) -> Any:
    config = U.BudgetConfig(background_tokens_per_day=day, background_tokens_per_user_per_day=user)
    return U.BackgroundBudget(config, ledger)


async def test_a_users_share_and_the_whole_bots_cap_hold_until_midnight(
    ledger: Any, sessions: CountingSessions
) -> None:
    budget = budget_of(ledger, day=250, user=100)
    assert (await budget.admit("extraction", user_view("a"))).allowed
    await budget.spent("extraction", "a", spend(80, 20))  # a: 100, the whole bot: 100
    with captured_logs("WARNING") as lines:
        held = await budget.admit("extraction", user_view("a"))
        assert not held.allowed and held.cap == "user"
        assert held.until == datetime(2031, 3, 15, tzinfo=NOON.tzinfo)
        assert held.wait_seconds(NOON) == 12 * 3600
        read = sessions.opened
        for feature in ("extraction", "persona", "subconscious"):
            assert not (await budget.admit(feature, user_view("a"))).allowed
        assert sessions.opened == read  # known for the rest of the day: no database read
        # A flood from a exhausts only a's share.
        assert (await budget.admit("persona", user_view("b"))).allowed
        await budget.spent("persona", "b", spend(140, 10))  # the whole bot: 250
        held = await budget.admit("subconscious", user_view("c"))
        assert not held.allowed and held.cap == "bot"
        assert not (await budget.admit("extraction", user_view("b"))).allowed
    reached = [line for line in lines if "达到" in line]
    assert len(reached) == 2, reached
    assert "[Memory] 用户 a 今天（2031-03-14）的后台请求已用 100 token" in reached[0]
    assert "background_tokens_per_user_per_day = 100" in reached[0]
    assert "[Memory] 今天（2031-03-14）插件的后台请求已用 250 token" in reached[1]
    assert "聊天不受影响" in reached[1]
    assert budget.held == {"extraction": 3, "persona": 1, "subconscious": 2}

    status = await budget.status_json()
    assert status["used_today"] == 250 and status["reached"] is True
    assert status["users_reached"] == [
        {"user_id": "b", "tokens": 150},
        {"user_id": "a", "tokens": 100},
    ]
    assert status["resets_at"] == "2031-03-15T00:00:00+08:00"

    ledger.calendar.clock.now = NOON + timedelta(hours=12)  # midnight: a new day
    for user in ("a", "b", "c"):
        assert (await budget.admit("extraction", user_view(user))).allowed


async def test_every_process_keys_the_owners_day_whatever_its_machine_zone(
    orm_db: str, sessions: CountingSessions
) -> None:
    """Three processes on one store whose clocks read the same moment in their machine's
    zone (UTC, Beijing, New York), one ``[memory] timezone = "Asia/Shanghai"``: one day,
    one cap, one midnight. 23:30 UTC on 14 March is 15 March in Beijing (with the
    machines' own days they disagreed, and the cap was spent once per day seen)."""
    from zoneinfo import ZoneInfo

    late = datetime(2031, 3, 14, 23, 30, tzinfo=UTC)
    machines = (UTC, ZoneInfo("Asia/Shanghai"), ZoneInfo("America/New_York"))
    ledgers = [
        U.UsageLedger(shanghai(lambda zone=zone: late.astimezone(zone)), sessions=sessions)
        for zone in machines
    ]
    assert [ledger.today() for ledger in ledgers] == ["2031-03-15"] * 3
    budgets = [budget_of(ledger, day=100) for ledger in ledgers]
    await budgets[0].spent("extraction", "a", spend(40, 10))
    await budgets[2].spent("extraction", "b", spend(40, 10))  # the bot's 100, in two processes
    for budget in budgets:
        held = await budget.admit("persona", user_view("c"))
        assert not held.allowed and held.cap == "bot"
        assert held.until == datetime(2031, 3, 15, 16, tzinfo=UTC)  # Beijing's next midnight
        assert (await budget.status_json())["resets_at"] == "2031-03-16T00:00:00+08:00"
    assert set(await ledgers[1].totals_by_day(1)) == {"2031-03-15"}
    # The same moment with ``timezone = "UTC"``: still the 14th.
    utc = U.UsageLedger(U.OwnerCalendar(ZoneInfo("UTC"), lambda: late), sessions=sessions)
    assert utc.today() == "2031-03-14"
    assert await utc.spent_by_all(utc.today()) == 0
    for ledger in (*ledgers, utc):
        await ledger.close()


async def test_zero_means_no_cap_and_costs_no_read(ledger: Any, sessions: CountingSessions) -> None:
    budget = budget_of(ledger)
    await budget.spent("extraction", "a", spend(10**9, 10**9))
    read = sessions.opened
    assert (await budget.admit("extraction", user_view("a"))).allowed
    assert sessions.opened == read
    budget.configure(
        U.BudgetConfig(background_tokens_per_day=0, background_tokens_per_user_per_day=5)
    )
    assert not (await budget.admit("extraction", user_view("a"))).allowed
    assert (await budget.admit("extraction", user_view("b"))).allowed


async def test_the_status_usage_has_every_feature_per_day(ledger: Any) -> None:
    clock = ledger.calendar.clock
    for back, tokens in ((0, (11, 7)), (1, (22, 14)), (29, (5, 5)), (30, (1000, 1000))):
        clock.now = NOON - timedelta(days=back)
        await ledger.add("extraction", "10001", spend(*tokens, cached=2))
    clock.now = NOON
    await ledger.add("subconscious", "10001", U.spend_of(None, sent=["整理"], answer="好"))
    usage = await U.usage_json(budget_of(ledger, day=1000))
    for span in ("today", "last_30_days"):
        assert set(usage[span]) == {"extraction", "persona", "subconscious", "episodes"}
        for row in usage[span].values():
            assert set(row) == {"requests", "prompt_tokens", "completion_tokens", "cached_tokens"}
    assert usage["today"]["extraction"] == {
        "requests": 1, "prompt_tokens": 11, "completion_tokens": 7, "cached_tokens": 2,
    }  # fmt: skip
    assert usage["last_30_days"]["extraction"]["requests"] == 3  # the 31st day is out
    assert usage["last_30_days"]["extraction"]["prompt_tokens"] == 11 + 22 + 5
    assert usage["estimated"]["last_30_days"] == {
        "extraction": 0,
        "persona": 0,
        "subconscious": 1,
        "episodes": 0,
    }
    daily = usage["daily"]
    assert len(daily["days"]) == 30 and daily["days"][-1] == "2031-03-14"
    assert daily["days"][0] == "2031-02-13"
    assert daily["extraction"][-1] == 18 and daily["extraction"][-2] == 36
    assert daily["extraction"][0] == 10 and sum(daily["persona"]) == 0
    assert usage["budget"]["background_tokens_per_day"] == 1000


# ---------------------------------------------------------------------------
# Two processes
# ---------------------------------------------------------------------------


def peer(url: str, where: Path) -> PeerProcess:
    """``tests/coherence_peer.py`` with the plugin's tables bound to ``url`` (as
    ``SQLALCHEMY_BINDS`` does for a bot), Amrita's in a SQLite file of its own."""
    return PeerProcess(
        peer_init(
            where / "data",
            where / "cache",
            sqlalchemy_database_url=f"sqlite+aiosqlite:///{where / 'own.sqlite3'}",
            sqlalchemy_binds={"amrita_plugin_memory": url},
            embed_check_on_startup=False,
            vector_db_local_server=False,
        )
    )


@pytest.fixture
def peer_of(tmp_path: Path) -> Iterator[Callable[[str], PeerProcess]]:
    peers: list[PeerProcess] = []

    def start(url: str) -> PeerProcess:
        peers.append(peer(url, tmp_path / f"peer{len(peers)}"))
        return peers[-1]

    yield start
    for started in peers:
        started.kill()


@pytest.fixture
async def bound_url(orm_db: str) -> AsyncIterator[str]:
    """The URL the plugin's tables of this test live on (the peer binds to it too)."""
    from nonebot_plugin_orm import get_session
    from sqlalchemy import Engine

    from amrita_plugin_memory.storage.models import UsageDay

    async with get_session() as session:
        bind = session.sync_session.get_bind(UsageDay)
    assert isinstance(bind, Engine)
    yield bind.url.render_as_string(hide_password=False)


async def test_two_processes_add_to_the_same_rows_and_lose_nothing(
    ledger: Any, bound_url: str, peer_of: Callable[[str], PeerProcess]
) -> None:
    other = peer_of(bound_url)
    assert (await other.read())["ready"]
    # Both start on a row that does not exist yet: one of the first inserts loses the race.
    command = {"feature": "extraction", "user": "20001", "times": 120, "concurrency": 8}
    other.send(op="usage_add", at=NOON.isoformat(), prompt=11, completion=7, **command)
    mine = [ledger.add("extraction", "20001", spend(11, 7, 3)) for _ in range(120)]
    for start in range(0, len(mine), 8):
        assert all(await asyncio.gather(*mine[start : start + 8]))
    assert await other.read() == {"added": 120, "written": True}
    today = (await ledger.totals_by_day(1))[NOON.date().isoformat()]
    assert today["extraction"] == U.Spend(240, 240 * 11, 240 * 7, 120 * 3, 0, 0)

    # The peer's budget sees what both processes spent (the ledger is shared).
    spent = 240 * 18

    async def admit(user: str, day_cap: int, user_cap: int) -> dict[str, Any]:
        caps = {"day_cap": day_cap, "user_cap": user_cap}
        return await other.ask(
            op="usage_admit", at=NOON.isoformat(), feature="persona", user=user, **caps
        )

    assert await admit("20001", 0, spent) == {"allowed": False, "cap": "user"}
    assert await admit("20002", 0, spent) == {"allowed": True, "cap": ""}
    assert await admit("20002", spent, 0) == {"allowed": False, "cap": "bot"}
