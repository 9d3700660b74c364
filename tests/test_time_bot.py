"""A real bot that lived on earlier days, asked about them in Chinese and English (issue 45).

One bot project (one data directory) lives through four earlier days, Beijing time
(:class:`~tests.faketime_bot.FaketimeBot`: its clock set back by libfaketime, the
machine's zone UTC, ``[memory] timezone = "Asia/Shanghai"``). It is started on the
first, stays up while its clock moves on to the next two, is stopped and started
again on the fourth (a restart on the same data directory), and stays up until
"today". On each day the user tells it a weekend travel plan — the same topic,
another city — and the scripted model calls ``write_memory``: on the first three at
07:20, before 08:00, so the UTC day is the day before; on the fourth at 21:40, so
that "yesterday" asked the next morning before 08:00 is another day in UTC days.
Then, "today" (2026-12-04 07:30 Beijing, a Friday), the user asks with a period in
the words: 上周, 上个月, 十月份, 昨天, "last week", and once with none. Active
recall is on, with the bundled multilingual model in-process
(``EMBEDDING_PROCTOL=local``: an English question must find Chinese memories), and
the model calls ``read_memory`` with the user's words.

Checked on what the chat server received: the ``<MEMORIES>`` block (after the
user's message) and the ``read_memory`` result have the period's plan first among
these same-topic plans, each ``<MEMORIES>`` line shows its local (Beijing) day
(``- [2026-12-03 周四] …``), and the question without a period sees all four.
Checked on the store: every ``created_at`` is the moment the bot lived, not today.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from time import monotonic
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tests.active_helpers import is_extraction
from tests.botproject import snapshot
from tests.conftest import CHAT
from tests.console_bot import run_async
from tests.faketime_bot import FaketimeBot, faked_env, write_moment
from tests.servers import ChatServer, Reply

pytestmark = pytest.mark.process

BEIJING = ZoneInfo("Asia/Shanghai")
USER = 10001
WEEKDAYS = "一二三四五六日"


@dataclass(frozen=True)
class Plan:
    """What the user said on one day (at ``at``, Beijing time), and the memory the model
    wrote of it."""

    day: date
    said: str
    content: str
    at: time = time(7, 20)
    """Before 08:00 by default: the UTC day is the day before."""

    @property
    def moment(self) -> datetime:
        return datetime.combine(self.day, self.at, tzinfo=BEIJING)


PLANS = (
    Plan(
        date(2026, 10, 14),
        "这个周末我想去杭州旅行，去西湖边走走。",
        "用户这个周末想去杭州旅行，去西湖边走走",
    ),
    Plan(
        date(2026, 11, 18),
        "这个周末我想去成都旅行，吃火锅看熊猫。",
        "用户这个周末想去成都旅行，吃火锅、看熊猫",
    ),
    Plan(
        date(2026, 11, 25),
        "这个周末我想去西安旅行，看兵马俑。",
        "用户这个周末想去西安旅行，看兵马俑",
    ),
    # Said in the evening (13:40 UTC, the same UTC day) and asked about the next morning
    # before 08:00 (still that UTC day): "yesterday" in UTC days is the day before it.
    Plan(
        date(2026, 12, 3),
        "这个周末我想去厦门旅行，上鼓浪屿。",
        "用户这个周末想去厦门旅行，上鼓浪屿",
        time(21, 40),
    ),
)
CITY = {p.day: p.content for p in PLANS}

TODAY = datetime(2026, 12, 4, 7, 30, tzinfo=BEIJING)
"""A Friday: this week began Monday 11-30, last week was 11-23 … 11-29."""


@dataclass(frozen=True)
class Question:
    """A question of "today" and the days whose plans must come first (in any order)."""

    words: str
    first: frozenset[date]


QUESTIONS = {
    "last_week_zh": Question("上周我说想去哪里旅行来着？", frozenset({date(2026, 11, 25)})),
    "last_month_zh": Question(
        "上个月我说想去哪里？", frozenset({date(2026, 11, 18), date(2026, 11, 25)})
    ),
    "october_zh": Question("十月份我提过去哪里旅行吗", frozenset({date(2026, 10, 14)})),
    "yesterday_zh": Question("昨天我说想去哪", frozenset({date(2026, 12, 3)})),
    "last_week_en": Question(
        "Where did I say I wanted to travel last week?", frozenset({date(2026, 11, 25)})
    ),
}
NO_PERIOD = "我说过想去哪些地方旅行？"


def _text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def _tool_names(body: dict[str, Any]) -> set[str]:
    return {str((t.get("function") or {}).get("name")) for t in body.get("tools") or []}


def _users_words(text: str) -> str:
    """The user's message without the plugin's section after it."""
    from amrita_plugin_memory.prompting.turn_section import TURN_SECTION_LEAD

    return text.split(TURN_SECTION_LEAD, 1)[0]


class TravelModel:
    """The scripted chat model: a plan said → ``write_memory`` with its memory; a question
    asked → ``read_memory`` with the user's words; a tool result → a short answer.
    Extraction requests (if any) learn nothing: only the tool writes."""

    def __init__(self, server: ChatServer) -> None:
        self.server = server
        server.set_rule(self._rule)

    def _rule(self, body: dict[str, Any]) -> Reply | None:
        if is_extraction(body):
            return Reply.text('{"memories": []}')
        messages = body.get("messages") or []
        if not messages or "write_memory" not in _tool_names(body):
            return None
        if messages[-1].get("role") == "tool":
            return Reply.text("好的。")
        words = _users_words(_text_of(messages[-1]))
        for plan in PLANS:
            if plan.said in words:
                args = {"content": plan.content, "tags": ["旅行"], "importance": "medium"}
                args["scope"] = "user"
                return Reply.tool_call("write_memory", args)
        for question in [*(q.words for q in QUESTIONS.values()), NO_PERIOD]:
            if question in words:
                args = {"query": question, "scope": "user", "top_k": 10}
                return Reply.tool_call("read_memory", args)
        return None


@dataclass
class Turn:
    """What the chat server received in one turn: the user's message as shown to the model
    (with the plugin's section) and the tool's result."""

    shown: str
    result: dict[str, Any]


@dataclass
class Lived:
    """What the scenario recorded (the module's tests assert on it)."""

    written: dict[date, dict[str, Any]] = field(default_factory=dict)
    """The ``write_memory`` result of each morning."""
    windows: dict[date, tuple[float, float]] = field(default_factory=dict)
    """Each morning's faked clock (POSIX) just before the message and after the reply."""
    event_times: dict[date, int] = field(default_factory=dict)
    """The ``time`` of the OneBot event of each morning's message."""
    turns: dict[str, Turn] = field(default_factory=dict)
    stored: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Live memories after the last run ``{content: metadata}``."""
    starts: list[float] = field(default_factory=list)
    seconds: float = 0.0


def _turn(requests: list[dict[str, Any]], question: str) -> Turn:
    """The turn of ``question`` among the chat requests it caused."""
    # The chat requests (with the memory tools): Amrita asks another question first, with
    # one tool of its own and before the plugin's hooks ran.
    chats = [r for r in requests if "write_memory" in _tool_names(r)]
    asked = [r for r in chats if question in _users_words(_text_of(r["messages"][-1]))]
    assert asked, f"no request for {question!r}"
    shown = _text_of(asked[0]["messages"][-1])
    results = [_text_of(m) for r in chats for m in r["messages"][-1:] if m.get("role") == "tool"]
    assert results, f"no tool result for {question!r}"
    try:
        return Turn(shown, json.loads(results[-1]))
    except ValueError:  # Amrita's text when the call itself failed
        return Turn(shown, {"ok": None, "failed": results[-1]})


async def _say(bot: FaketimeBot, text: str) -> int:
    """``text`` from the user as a private message; the event's ``time``."""
    async with bot.onebot({USER}) as link:
        stamp = int(link.clock())
        await link.say(USER, text)
    return stamp


async def _stored(bot: FaketimeBot) -> dict[str, dict[str, Any]]:
    """The live memories ``{content: metadata}`` of the bot's store (the bot stopped)."""
    rt = bot.project.runtime()
    try:
        live = await snapshot(rt, rt.store.name)
    finally:
        await rt.close()
    return {str(doc): dict(meta or {}) for doc, meta in live.values()}


def _live(root: Path) -> Lived:
    started = monotonic()
    lived = Lived()
    bot = FaketimeBot(
        root,
        CHAT,
        plugin_config=(
            '[memory]\ntimezone = "Asia/Shanghai"\n\n'
            # Recall on, learning by extraction never due (only the tool writes here).
            "[active_memory]\nenabled = true\nrecall = true\nrecall_top_k = 5\n"
            "recall_max_chars = 2000\nbatch_messages = 100\nidle_seconds = 86400\n"
            "notice = false\n"
            # The query's embedding waits longer than by default: on a busy machine a late
            # one would leave a turn without its block (a latency the test does not measure).
            "recall_timeout_seconds = 15\n"
        ),
        EMBEDDING_PROCTOL="local",
        EMBEDDING_MODEL_NAME="auto",
    )
    # 10-14 started, then up until 11-25 (its clock moved on); stopped; started again on
    # 12-03 (the same data directory) and up until "today".
    restart = {PLANS[0].day, date(2026, 12, 3)}
    for plan in PLANS:
        if plan.day in restart:
            bot.stop()
            bot.start(plan.moment)
        else:
            bot.travel(plan.moment)
        try:
            clock = bot.clock
            assert clock is not None
            before = clock.timestamp()
            lived.event_times[plan.day] = run_async(_say(bot, plan.said))
            lived.windows[plan.day] = (before, clock.timestamp())
            lived.written[plan.day] = _turn(CHAT.requests, plan.said).result
        except BaseException:
            bot.stop()
            raise
        CHAT.clear()
        TravelModel(CHAT)
    try:
        bot.travel(TODAY)
        for name, question in [*((k, q.words) for k, q in QUESTIONS.items()), ("none", NO_PERIOD)]:
            run_async(_say(bot, question))
            lived.turns[name] = _turn(CHAT.requests, question)
            CHAT.clear()
            TravelModel(CHAT)
    finally:
        bot.stop()
    lived.stored = run_async(_stored(bot))
    lived.starts = bot.start_seconds
    lived.seconds = monotonic() - started
    return lived


@pytest.fixture(scope="module")
def lived(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lived]:
    CHAT.clear()
    TravelModel(CHAT)
    try:
        found = _live(tmp_path_factory.mktemp("time_bot"))
    finally:
        CHAT.clear()
    print(
        f"\n[time bot] scenario {found.seconds:.1f} s; starts "
        + ", ".join(f"{s:.1f}" for s in found.starts)
        + " s"
    )
    yield found


# ---------------------------------------------------------------- what was shown


LINE = re.compile(r"^- \[(\d{4}-\d{2}-\d{2})(?: 周([一二三四五六日]))?(?:; 事件 [^\]]*)?\] (.*)$")


def _memories_block(shown: str) -> list[tuple[str, str | None, str]]:
    """``(date, weekday, text)`` of each line of the ``<MEMORIES>`` block after the user's words."""
    from amrita_plugin_memory.prompting.turn_section import TURN_SECTION_LEAD

    assert TURN_SECTION_LEAD in shown, f"no plugin section after the message: {shown!r}"
    section = shown.split(TURN_SECTION_LEAD, 1)[1]
    block = re.search(r"<MEMORIES>(.*?)</MEMORIES>", section, re.S)
    assert block, f"no <MEMORIES> block: {section!r}"
    lines = [m.groups() for m in map(LINE.match, block.group(1).splitlines()) if m]
    return [(d, w, t) for d, w, t in lines]


def _plans_in_order(texts: list[str]) -> list[date]:
    """The days of the travel plans among ``texts``, in the order shown."""
    by_content = {p.content: p.day for p in PLANS}
    return [by_content[t] for t in texts if t in by_content]


def _assert_period_first(days: list[date], first: frozenset[date], where: str) -> None:
    """Every plan of the period is shown, and before every other plan."""
    assert first <= set(days), f"{where}: the period's plans {sorted(first)} missing in {days}"
    leading = days[: len(first)]
    assert set(leading) == first, f"{where}: {days} does not start with {sorted(first)}"


# ---------------------------------------------------------------- the clock


def test_the_bot_lived_on_those_mornings_and_stamped_them(lived: Lived) -> None:
    """Each ``write_memory`` result and stored memory carries the faked moment (its Beijing
    day is the plan's day; its UTC day the day before), the OneBot event was stamped with the
    same clock, and nothing is stamped today."""
    for plan in PLANS:
        memory = lived.written[plan.day]["memory"]
        assert memory["content"] == plan.content
        stamp = datetime.fromisoformat(memory["created_at"])
        low, high = lived.windows[plan.day]
        assert int(low) <= stamp.timestamp() <= high, (plan.day, memory["created_at"])
        assert stamp.utcoffset() == timedelta(hours=8)  # shown in the owner's zone
        assert stamp.date() == plan.day
        stored = datetime.fromisoformat(lived.stored[plan.content]["created_at"])
        assert stored.utcoffset() == timedelta(0)  # stored absolute, in UTC
        assert stored.date() == plan.moment.astimezone(UTC).date() and stored == stamp
        assert int(low) <= lived.event_times[plan.day] <= stamp.timestamp()  # said, then written
    assert set(lived.stored) == {p.content for p in PLANS}


def test_recall_ran_on_today(lived: Lived) -> None:
    """Every question of "today" got a ``<MEMORIES>`` block and a ``read_memory`` answer."""
    for name, turn in lived.turns.items():
        assert turn.result.get("ok") is True, (name, turn.result)
        assert _memories_block(turn.shown), name


# ---------------------------------------------------------------- recall by period


@pytest.mark.parametrize("name", list(QUESTIONS))
def test_memories_block_puts_the_period_first(lived: Lived, name: str) -> None:
    lines = _memories_block(lived.turns[name].shown)
    days = _plans_in_order([text for _, _, text in lines])
    _assert_period_first(days, QUESTIONS[name].first, f"<MEMORIES> for {name}")


@pytest.mark.parametrize("name", list(QUESTIONS))
def test_read_memory_puts_the_period_first(lived: Lived, name: str) -> None:
    memories = lived.turns[name].result["memories"]
    days = _plans_in_order([m["content"] for m in memories])
    _assert_period_first(days, QUESTIONS[name].first, f"read_memory for {name}")


@pytest.mark.parametrize("name", [*QUESTIONS, "none"])
def test_each_shown_date_is_the_local_day(lived: Lived, name: str) -> None:
    """``- [2026-12-03 周四] …``: the Beijing day the plan was told, with its weekday."""
    lines = _memories_block(lived.turns[name].shown)
    by_content = {p.content: p.day for p in PLANS}
    shown = [(d, w, t) for d, w, t in lines if t in by_content]
    assert shown, lines
    expected = [(by_content[t].isoformat(), WEEKDAYS[by_content[t].weekday()]) for *_, t in shown]
    assert [(day, weekday) for day, weekday, _ in shown] == expected
    # read_memory's answer: the stamp in the owner's zone, so its date is the Beijing day.
    found = [m for m in lived.turns[name].result["memories"] if m["content"] in by_content]
    assert found
    for memory in found:
        assert memory["created_at"][:10] == by_content[memory["content"]].isoformat(), memory


def test_no_period_loses_nothing_by_age(lived: Lived) -> None:
    turn = lived.turns["none"]
    block = _plans_in_order([text for _, _, text in _memories_block(turn.shown)])
    assert set(block) == set(CITY), block
    tool = _plans_in_order([m["content"] for m in turn.result["memories"]])
    assert set(tool) == set(CITY), tool


# ---------------------------------------------------------------- the harness itself

CHILD = """
import asyncio, json, sys, time
from datetime import datetime, timezone

async def main():
    wall, mono = time.time(), time.monotonic()
    await asyncio.sleep(0.5)
    slept = (time.time() - wall, time.monotonic() - mono)
    print(json.dumps({"wall": wall, "mono": mono, "slept": slept,
                      "now": datetime.now(timezone.utc).isoformat()}), flush=True)
    sys.stdin.readline()  # the parent moved the clock on
    deadline = time.monotonic() + 10
    while time.time() < float(sys.argv[1]) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    print(json.dumps({"wall": time.time()}), flush=True)

asyncio.run(main())
"""


def test_a_child_lives_on_the_faked_clock_with_real_timers(tmp_path: Path) -> None:
    """libfaketime as the harness sets it up: ``time.time()`` and ``datetime.now()`` are the
    faked moment, the monotonic clock and an asyncio sleep are real, and a running process
    follows the moment file forward."""
    moment_file = tmp_path / "moment"
    clock = write_moment(moment_file, PLANS[0].moment)
    later = datetime(2026, 11, 24, 23, 20, tzinfo=UTC)
    with subprocess.Popen(
        [sys.executable, "-c", CHILD, str(later.timestamp())],
        env={**os.environ, **faked_env(moment_file)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as child:
        assert child.stdin is not None and child.stdout is not None
        first = json.loads(child.stdout.readline())
        moved = write_moment(moment_file, later)
        child.stdin.write("\n")
        child.stdin.flush()
        second = json.loads(child.stdout.readline())
        child.stdin.close()
        assert child.wait(30) == 0
    assert abs(first["wall"] - PLANS[0].moment.timestamp()) < 30
    assert abs(first["wall"] - clock.timestamp()) < 30  # the harness's clock agrees
    assert datetime.fromisoformat(first["now"]).astimezone(BEIJING).date() == PLANS[0].day
    assert abs(first["mono"] - monotonic()) < 30  # the monotonic clock is the real one
    wall_slept, mono_slept = first["slept"]
    assert 0.45 < mono_slept < 5 and 0.45 < wall_slept < 5  # real seconds, not days
    assert later.timestamp() <= second["wall"] <= moved.timestamp()
