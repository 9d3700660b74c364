"""Conversation episodes in a real bot that lived on earlier days (issue #48).

One bot project (:class:`~tests.faketime_bot.FaketimeBot`: ``ambot run`` with its wall
clock set back by libfaketime, the machine's zone UTC, ``[memory] timezone =
"Asia/Shanghai"``) is driven through a OneBot V11 reverse WebSocket whose events carry
the same faked clock, and read through the memory console's real timeline API:

* 2026-12-01 (a Tuesday) 07:30 Beijing — the UTC day is the day before: user A talks
  about a job interview in private; A and B plan a dinner in group 20001; B alone
  says one line in group 20002.
* 07:55 (25 minutes idle, under ``idle_minutes = 30``): nothing is closed yet.
* 08:40: the three conversations are episodes — private and 20001 summarised by the
  background model (``model``), the two-line 20002 one without a request (``extract``).
* 12-02 07:30: 「上次我们聊到哪了？」 and "What did we talk about last time?" in private
  get ``<EPISODES>`` with ``2026-12-01 周二`` and the interview, never the group's;
  「昨天群里聊了什么？」 in group 20001 gets the dinner, never the private chat; a turn
  that asks nothing gets no block.
* The model then fails (HTTP 500): those conversations are kept extractively.
* 23:50: A talks again; the bot is stopped at once (its buffered lines written at
  shutdown) and started again at 12-03 00:05, 15 minutes later: the conversation is
  closed by the local day's end (not by idleness) after the restart, and the model's
  junk answer is refused for an extractive summary.
* A's ``/memory user forget`` removes every episode of A's private chat and of the groups
  A spoke in, and A's waiting lines; B's own group episode stays.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import time as clock_time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest

from tests.conftest import CHAT
from tests.console_bot import api_data, login, run_async
from tests.faketime_bot import FaketimeBot
from tests.servers import ChatServer, Reply

pytestmark = pytest.mark.process

BEIJING = ZoneInfo("Asia/Shanghai")
A, B = 10001, 10002
GROUP, B_GROUP = 20001, 20002
PACE = 1.2
"""Real seconds between two messages of one user (``RATE_LIMIT=1``: Amrita drops faster ones)."""
WAIT = 90.0
"""A hang guard for a background pass (one every 10 s), not a measurement."""

INTERVIEW = ("我明天要去一家游戏公司面试，已经到二面了。", "二面是技术面，我有点紧张。")
DINNER = ("周五晚上一起去吃火锅吧", "好啊，我来订位子")
DINNER_TO_BOT = "你觉得哪家火锅店好？"
REPORT = "下周的周报我来写"
INTERVIEW_SUMMARY = "用户明天去游戏公司二面（技术面），有点紧张。"
DINNER_SUMMARY = "群友约好周五晚上一起吃火锅，有人负责订位子。"
LAST_ZH = "上次我们聊到哪了？"
LAST_EN = "What did we talk about last time?"
GROUP_YESTERDAY = "昨天群里聊了什么？"
PLAIN = "今天天气不错。"
NIGHT = ("晚安，明天见。", "明天早上还要去复试，有点睡不着，想早点休息，明天起来再复习一下算法题。")


def at(day: int, hour: int, minute: int) -> datetime:
    return datetime(2026, 12, day, hour, minute, tzinfo=BEIJING)


def _text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def _is_summary(body: dict[str, Any]) -> bool:
    from amrita_plugin_memory.prompting.episode_summary import EPISODE_MARKER

    messages = body.get("messages") or []
    return bool(messages) and _text_of(messages[0]).startswith(EPISODE_MARKER)


class EpisodeModel:
    """The scripted model: a summary request is answered by ``mode`` (``json``: the
    conversation's summary, ``fail``: HTTP 500, ``junk``: text that is no JSON object);
    every chat turn gets the server's default text."""

    def __init__(self, server: ChatServer) -> None:
        self.mode = "json"
        self.summaries: list[tuple[str, str]] = []
        """``(mode, conversation)`` of each summary request."""
        server.set_rule(self._rule)

    def _rule(self, body: dict[str, Any]) -> Reply | None:
        if not _is_summary(body):
            return None
        conversation = "\n".join(_text_of(m) for m in body["messages"][1:])
        self.summaries.append((self.mode, conversation))
        if self.mode == "fail":
            return Reply(content="", status=500)
        if self.mode == "junk":
            return Reply.text("好的，我来总结一下这段对话：聊得很开心。")
        summary = INTERVIEW_SUMMARY if "面试" in conversation else DINNER_SUMMARY
        topic = "面试" if "面试" in conversation else "聚餐"
        return Reply.text(json.dumps({"summary": summary, "topics": [topic]}, ensure_ascii=False))


@dataclass
class Lived:
    """What the scenario saw (the module's tests assert on it)."""

    timelines: dict[str, dict[str, list[dict[str, Any]]]] = field(default_factory=dict)
    """``{moment: {"user"|"group"|"b_group": episodes}}`` read through the console."""
    summaries: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    """The summary requests sent by each phase."""
    turns: dict[str, str] = field(default_factory=dict)
    """The chat request of each question (all its messages' text)."""
    forget_replies: list[str] = field(default_factory=list)
    db_after: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    log: str = ""


class Console:
    """The memory console of the running bot through the WebUI's real login (logged in
    again when the bot's clock moved past the session's expiry)."""

    def __init__(self, bot: FaketimeBot) -> None:
        self.client = httpx.Client(base_url=bot.running.url, timeout=60)

    def get(self, path: str, **params: Any) -> Any:
        resp = self.client.get(path, params=params)
        if resp.status_code == 401:
            assert login(self.client).json()["success"]
            resp = self.client.get(path, params=params)
        return api_data(resp)

    def episodes(self, **chat: int) -> list[dict[str, Any]]:
        """The chat's episodes of the last 30 days (``GET /api/memory/timeline``)."""
        found = self.get("/api/memory/timeline", **chat, days=30)
        episodes = [e for day in found["timeline"] for e in day["episodes"]]
        return sorted(episodes, key=lambda e: e["start_at"])  # oldest first

    def timeline(self) -> dict[str, list[dict[str, Any]]]:
        return {
            "user": self.episodes(user=A),
            "group": self.episodes(group=GROUP),
            "b_group": self.episodes(group=B_GROUP),
        }

    def until(self, done: Any, what: str) -> dict[str, list[dict[str, Any]]]:
        """The timeline once ``done(timeline)`` holds (the bot's passes run every 10 s)."""
        deadline = clock_time.monotonic() + WAIT
        while True:
            timeline = self.timeline()
            if done(timeline):
                return timeline
            if clock_time.monotonic() > deadline:
                raise AssertionError(f"{what}: not after {WAIT} s: {timeline}")
            clock_time.sleep(1)

    def close(self) -> None:
        self.client.close()


def _request_of(question: str) -> str:
    """The text of the chat request that carried ``question`` (its last user message)."""
    for body in CHAT.requests:
        messages = body.get("messages") or []
        tools = {str((t.get("function") or {}).get("name")) for t in body.get("tools") or []}
        # The chat turn itself (with the memory tools): Amrita asks a question of its own
        # first, before the plugin's hooks ran.
        if "write_memory" not in tools or not messages:
            continue
        users = [m for m in messages if m.get("role") == "user"]
        if users and question in _text_of(users[-1]):
            return "\n".join(_text_of(m) for m in messages)
    raise AssertionError(f"no chat request for {question!r}")


async def _private(bot: FaketimeBot, *texts: str, user: int = A) -> list[str]:
    """``texts`` from ``user`` in private, each answered; the bot's replies."""
    async with bot.onebot({A, B}) as link:
        for text in texts:
            await asyncio.sleep(PACE)
            await link.say(user, text)
        return link.replies()


async def _group(bot: FaketimeBot, lines: list[tuple[int, int, str, bool]]) -> None:
    """``(user, group, text, to_me)`` group messages in order (those at the bot answered)."""
    async with bot.onebot({A, B}) as link:
        for user, group, text, to_me in lines:
            await asyncio.sleep(PACE)
            await link.say_in_group(user, group, text, to_me=to_me)
        await asyncio.sleep(PACE)  # the last unanswered message is handled before closing


@contextlib.contextmanager
def _console(bot: FaketimeBot) -> Iterator[Console]:
    console = Console(bot)
    try:
        yield console
    finally:
        console.close()


def _phase(lived: Lived, model: EpisodeModel, name: str) -> None:
    lived.summaries[name] = list(model.summaries)
    model.summaries.clear()


def _db(root: Path) -> dict[str, Any]:
    """What the stopped bot's SQLite store holds of episodes."""
    db = root / "data" / "nonebot_plugin_orm" / "db.sqlite3"
    with contextlib.closing(sqlite3.connect(db)) as conn:
        episodes = conn.execute(
            "SELECT chat, origin, summary FROM amrita_plugin_memory_episode"
        ).fetchall()
        members = conn.execute("SELECT user_id FROM amrita_plugin_memory_episode_member").fetchall()
        lines = conn.execute(
            "SELECT chat, user_id, text FROM amrita_plugin_memory_episode_line"
        ).fetchall()
    return {"episodes": episodes, "members": members, "lines": lines}


def _live(root: Path) -> Lived:
    started = clock_time.monotonic()
    lived = Lived()
    model = EpisodeModel(CHAT)
    bot = FaketimeBot(
        root,
        CHAT,
        plugin_config=(
            '[memory]\ntimezone = "Asia/Shanghai"\n\n'
            "[active_memory]\nenabled = false\n\n"
            "[episodes]\nidle_minutes = 30\n"
        ),
        RATE_LIMIT=1,
    )
    bot.start(at(1, 7, 30))
    try:
        # -- 12-01: three conversations --------------------------------------------------
        run_async(_private(bot, *INTERVIEW))
        run_async(
            _group(
                bot,
                [
                    (A, GROUP, DINNER[0], False),
                    (B, GROUP, DINNER[1], False),
                    (B, GROUP, DINNER_TO_BOT, True),
                    (B, B_GROUP, REPORT, False),
                ],
            )
        )
        bot.travel(at(1, 7, 55))
        with _console(bot) as api:
            clock_time.sleep(21)  # two passes at 25 minutes idle
            lived.timelines["07:55"] = api.timeline()
            _phase(lived, model, "07:55")
            bot.travel(at(1, 8, 40))
            lived.timelines["08:40"] = api.until(
                lambda t: all(t.values()), "the 12-01 conversations closed"
            )
            _phase(lived, model, "08:40")

        # -- 12-02: asked about them ---------------------------------------------------------
        bot.travel(at(2, 7, 30))
        run_async(_private(bot, LAST_ZH, LAST_EN, PLAIN))
        run_async(_group(bot, [(A, GROUP, GROUP_YESTERDAY, True)]))
        for question in (LAST_ZH, LAST_EN, PLAIN, GROUP_YESTERDAY):
            lived.turns[question] = _request_of(question)
        model.mode = "fail"
        bot.travel(at(2, 23, 50))
        with _console(bot) as api:
            lived.timelines["23:50"] = api.until(
                lambda t: len(t["user"]) == 2 and len(t["group"]) == 2,
                "the 12-02 morning conversations closed",
            )
        _phase(lived, model, "23:50")
        model.mode = "junk"
        run_async(_private(bot, *NIGHT))
    finally:
        bot.stop()  # at once: the night's lines are still in the buffer (a pass is 10 s)

    # -- 12-03 00:05: restarted; the night's conversation closed by the day's end -------------
    bot.start(at(3, 0, 5))
    try:
        with _console(bot) as api:
            lived.timelines["00:05"] = api.until(
                lambda t: len(t["user"]) == 3, "the night's conversation closed"
            )
            _phase(lived, model, "00:05")
            lived.forget_replies = run_async(
                _private(bot, "/memory user forget", "/memory user forget confirm")
            )
            lived.timelines["forgotten"] = api.timeline()
    finally:
        bot.stop()
        lived.log = bot.log()
    lived.db_after = _db(root)
    lived.seconds = clock_time.monotonic() - started
    return lived


@pytest.fixture(scope="module")
def lived(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lived]:
    CHAT.clear()
    try:
        found = _live(tmp_path_factory.mktemp("episode_bot"))
    finally:
        CHAT.clear()
    print(f"\n[episode bot] scenario {found.seconds:.1f} s")
    yield found


def _block(request: str) -> str:
    """The ``<EPISODES>`` block of a chat request ('' when it has none)."""
    start = request.find("<EPISODES>")
    return "" if start < 0 else request[start : request.find("</EPISODES>", start)]


# ---------------------------------------------------------------- recording and closing


def test_nothing_closes_before_the_idle_gap(lived: Lived) -> None:
    assert lived.timelines["07:55"] == {"user": [], "group": [], "b_group": []}
    assert lived.summaries["07:55"] == []


def test_ended_conversations_are_summarised_on_the_local_day(lived: Lived) -> None:
    timeline = lived.timelines["08:40"]
    [mine], [ours], [bs] = timeline["user"], timeline["group"], timeline["b_group"]
    assert (mine["summary"], mine["source"], mine["topics"]) == (
        INTERVIEW_SUMMARY,
        "model",
        ["面试"],
    )
    # 07:30 Beijing is 23:30 UTC of the day before: shown on the owner's day.
    assert mine["start_at"].startswith("2026-12-01T07:3"), mine
    assert mine["messages"] == 4 and mine["participants"] == 1
    assert (ours["summary"], ours["source"], ours["participants"]) == (DINNER_SUMMARY, "model", 2)
    assert ours["messages"] == 4 and ours["origin"] == f"group:{GROUP}"
    # Two short lines: no request, an extractive summary.
    assert bs["source"] == "extract" and REPORT[:4] in bs["summary"] and bs["messages"] == 1
    assert len(lived.summaries["08:40"]) == 2


def test_summary_requests_keep_each_chat_to_itself(lived: Lived) -> None:
    """The group's request has the group's lines only, its members anonymised; the private
    request has no group line."""
    requests = {("面试" in c): c for _, c in lived.summaries["08:40"]}
    private, group = requests[True], requests[False]
    assert all(line in private for line in INTERVIEW) and "火锅" not in private
    assert all(line in group for line in (*DINNER, DINNER_TO_BOT))
    assert "面试" not in group and REPORT not in group
    assert f"user{A}" not in group and f"user{B}" not in group  # nicknames not shown


# ---------------------------------------------------------------- recall


def test_last_time_in_private_recalls_the_private_episode(lived: Lived) -> None:
    for question in (LAST_ZH, LAST_EN):
        block = _block(lived.turns[question])
        assert "2026-12-01 周二" in block and INTERVIEW_SUMMARY in block, (question, block)
        assert DINNER_SUMMARY not in lived.turns[question], question


def test_yesterday_in_the_group_recalls_the_groups_episode_only(lived: Lived) -> None:
    request = lived.turns[GROUP_YESTERDAY]
    block = _block(request)
    assert "2026-12-01 周二" in block and DINNER_SUMMARY in block, block
    assert INTERVIEW_SUMMARY not in request and "面试" not in request


def test_a_turn_that_asks_nothing_gets_no_block(lived: Lived) -> None:
    assert _block(lived.turns[PLAIN]) == ""


# ---------------------------------------------------------------- faults, restart, the day's end


def test_a_failing_model_leaves_an_extractive_episode(lived: Lived) -> None:
    timeline = lived.timelines["23:50"]
    newest_mine, newest_ours = timeline["user"][-1], timeline["group"][-1]
    assert newest_mine["source"] == newest_ours["source"] == "extract"
    assert newest_mine["start_at"].startswith("2026-12-02T07:3")
    assert GROUP_YESTERDAY[:4] in newest_ours["summary"]
    assert lived.summaries["23:50"] and {m for m, _ in lived.summaries["23:50"]} == {"fail"}


def test_the_local_days_end_closes_a_conversation_across_a_restart(lived: Lived) -> None:
    """The night's lines were buffered when the bot stopped; after the restart, 15 minutes
    idle, the conversation is closed because the local day ended; the junk answer refused."""
    night = lived.timelines["00:05"]["user"][-1]
    assert night["start_at"].startswith("2026-12-02T23:5") and night["end_at"].startswith(
        "2026-12-02T23:5"
    ), night
    assert night["messages"] == 4 and night["source"] == "extract"
    assert [m for m, _ in lived.summaries["00:05"]] == ["junk"]
    assert NIGHT[0] in lived.summaries["00:05"][0][1]


# ---------------------------------------------------------------- forget


def test_forget_removes_the_users_episodes_and_lines(lived: Lived) -> None:
    assert any("已删除机器人保存的你的数据" in r for r in lived.forget_replies), (
        lived.forget_replies
    )
    after = lived.timelines["forgotten"]
    assert after["user"] == [] and after["group"] == [], after
    assert [e["source"] for e in after["b_group"]] == ["extract"]  # B's own group: kept
    db = lived.db_after
    assert db["episodes"] == [
        (f"{_group_key(B_GROUP)}", f"group:{B_GROUP}", after["b_group"][0]["summary"])
    ]
    assert db["members"] == [(str(B),)]
    assert all(user != str(A) and "面试" not in text for _, user, text in db["lines"]), db["lines"]


def _group_key(group_id: int) -> str:
    from amrita_plugin_memory.storage.keys import group_key

    return group_key(group_id)


def test_no_traceback_in_the_log(lived: Lived) -> None:
    assert "Traceback" not in lived.log
