"""Every background token counted, and ``[budget]`` holding background work, on real turns.

The session's bot answers real chat turns (OneBot events, the scripted chat
server as the model); active memory's extraction, persona extraction and an L3
cycle send their requests to the same server, which reports ``usage`` (with the
cached share as OpenAI and DeepSeek do) or, for the estimate path, none. The
ledger is the session's real table; its clock is moved to a day of its own per
test, so figures are exact and "the next day" is a clock moved on, not a wait.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tests.active_helpers import active, answer_rule, extractions, settle
from tests.conftest import captured_logs
from tests.events import private_event
from tests.group_helpers import group_view, groups, say
from tests.helpers import chat_requests, runtime, system_prompt, user_view
from tests.servers import ChatServer

__all__ = ["active", "groups"]  # the fixtures, imported for pytest

pytestmark = pytest.mark.usefixtures("whole_replies")

_days = itertools.count(0)
_users = itertools.count(5_401_001)


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def day() -> Iterator[Clock]:
    """The ledger's clock at noon of a day no other test writes, its days Beijing's
    (``[memory] timezone = "Asia/Shanghai"``); caps off, restored after."""
    from amrita_plugin_memory.core.calendar import OwnerCalendar
    from amrita_plugin_memory.core.config import BudgetConfig

    rt = runtime()
    saved = (rt.usage.calendar, rt.budget.config)
    start = datetime(2033, 1, 1, 12, tzinfo=timezone(timedelta(hours=8)))
    clock = Clock(start + timedelta(days=3 * next(_days)))
    rt.usage.calendar = OwnerCalendar(ZoneInfo("Asia/Shanghai"), clock)
    rt.budget.configure(
        BudgetConfig(background_tokens_per_day=0, background_tokens_per_user_per_day=0)
    )
    yield clock
    rt.usage.calendar, config = saved
    rt.budget.configure(config)


def caps(*, bot: int = 0, user: int = 0) -> None:
    from amrita_plugin_memory.core.config import BudgetConfig

    runtime().budget.configure(
        BudgetConfig(background_tokens_per_day=bot, background_tokens_per_user_per_day=user)
    )


async def usage_today() -> dict[str, Any]:
    from amrita_plugin_memory.storage.usage import usage_report

    await runtime().usage.flush()
    return await usage_report(runtime().budget)


async def user_tokens(clock: Clock, user: int) -> int:
    return (await runtime().usage.spent_on(clock.now.date().isoformat(), user_view(user)))[1]


def key(uid: int) -> Any:
    from amrita_plugin_memory.active import BatchKey
    from amrita_plugin_memory.storage.keys import user_key

    return BatchKey(str(uid), user_key(uid), "private")


NOTHING = answer_rule(lambda _: {"memories": []})


# ---------------------------------------------------------------------------
# Counting
# ---------------------------------------------------------------------------


async def test_an_extraction_and_the_blocks_of_a_turn_are_counted(
    chat_server: ChatServer, active: Callable[..., Any], day: Clock
) -> None:
    from amrita_plugin_memory.storage.keys import user_key

    service = active(batch_messages=1, recall=False)
    uid = next(_users)
    await runtime().memo.update(user_key(uid), "用户下周三体检，要空腹")
    chat_server.set_rule(NOTHING)
    recorder = await say(private_event(uid, "我养了一只橘猫"))
    await settle(service)
    assert recorder.texts("private")  # answered

    usage = await usage_today()
    # The provider's usage as amrita-core returns it: 11/7 tokens. The server also reports
    # 4 cached tokens, OpenAI's and DeepSeek's way; amrita-core 1.3's OpenAI adapter does
    # not pass them on, so the cached share is unknown here (0), not made up.
    assert usage["today"]["extraction"] == {
        "requests": 1, "prompt_tokens": 11, "completion_tokens": 7, "cached_tokens": 0,
    }  # fmt: skip
    assert usage["today"]["persona"]["requests"] == usage["today"]["subconscious"]["requests"] == 0
    assert usage["estimated"]["today"]["extraction"] == 0
    assert await user_tokens(day, uid) == 18
    assert usage["daily"]["extraction"][-1] == 18

    # What the plugin added to the turn: its tools' schemas and the memo block, as sent.
    (request, *_) = [r for r in chat_requests(chat_server) if r.get("tools")]
    blocks = usage["blocks"]["today"]
    assert blocks["turns"] == 1
    memo = system_prompt(request)
    shown = memo[memo.index("<MEMO>") : memo.index("</MEMO>") + len("</MEMO>")]
    assert blocks["memo"] == {"turns": 1, "chars": len(shown), "chars_per_turn": len(shown)}
    ours = {"write_memory", "read_memory", "update_memory", "delete_memory", "list_memory"}
    ours |= {"update_memo"}
    sent = [t for t in request["tools"] if t["function"]["name"] in ours]
    assert len(sent) == 6
    chars = sum(len(json.dumps(t, ensure_ascii=False, separators=(",", ":"))) for t in sent)
    assert blocks["tools"] == {"turns": 1, "chars": chars, "chars_per_turn": chars}
    assert blocks["memories"]["turns"] == 0


async def test_without_usage_from_the_provider_the_tokens_are_estimated(
    chat_server: ChatServer, active: Callable[..., Any], day: Clock
) -> None:
    from amrita_plugin_memory.storage.usage import estimate_tokens

    service = active(batch_messages=1, recall=False)
    uid = next(_users)
    answer = {"memories": [{"op": "add", "content": "用户养了一只叫年糕的橘猫"}]}
    chat_server.set_rule(answer_rule(lambda _: answer))
    chat_server.set_usage(None)  # a provider that reports no usage at all
    await say(private_event(uid, "我养了一只叫年糕的橘猫"))
    await settle(service)

    (request,) = extractions(chat_server)
    usage = await usage_today()
    assert usage["estimated"]["today"]["extraction"] == 1
    expected = sum(estimate_tokens(m["content"]) for m in request["messages"])
    assert usage["today"]["extraction"] == {
        "requests": 1,
        "prompt_tokens": expected,
        "completion_tokens": estimate_tokens(json.dumps(answer, ensure_ascii=False)),
        "cached_tokens": 0,
    }
    assert expected > 400  # the instructions alone are several hundred characters


# ---------------------------------------------------------------------------
# The caps
# ---------------------------------------------------------------------------


async def test_a_users_share_holds_only_that_user_until_the_next_day(
    chat_server: ChatServer, active: Callable[..., Any], day: Clock
) -> None:
    service = active(batch_messages=1, recall=False, max_pending_turns=3)
    flooder, other = next(_users), next(_users)
    caps(user=1)  # one request spends the share
    chat_server.set_rule(NOTHING)
    with captured_logs("INFO") as lines:
        replies = await say(private_event(flooder, "第一条"))
        await settle(service)
        for text in ("第二条", "第三条", "第四条", "第五条"):
            replies = await say(private_event(flooder, text), recorder=replies)
            await settle(service)
        assert len(replies.texts("private")) == 5  # every turn answered
        answered = await say(private_event(other, "另一个用户的消息"))
        await settle(service)
        assert answered.texts("private")
    assert len(extractions(chat_server)) == 2  # the flooder's first, the other user's
    # The flooder's turns wait, bounded: the newest three kept, the oldest dropped (logged).
    assert service.queue.waiting(key(flooder)) == 3
    assert any("丢弃最早的" in line for line in lines)
    reached = [line for line in lines if "达到每人上限" in line]
    assert len(reached) == 1 and f"用户 {flooder} 今天" in reached[0]
    assert reached[0].startswith("WARNING [Memory]")
    assert await user_tokens(day, flooder) == 18 and await user_tokens(day, other) == 18
    status = (await usage_today())["budget"]
    assert status["users_reached"] == [
        {"user_id": str(flooder), "tokens": 18},
        {"user_id": str(other), "tokens": 18},
    ]  # the other reached its tiny share too, after its request

    day.now += timedelta(days=1)  # the next local day: the waiting turns go
    await say(private_event(flooder, "第六条"))
    await settle(service)
    last = extractions(chat_server)[-1]["messages"][1]["content"]
    assert [t for t in ("第三条", "第四条", "第五条", "第六条") if t in last] == [
        "第四条",
        "第五条",
        "第六条",
    ]
    assert service.queue.waiting(key(flooder)) == 0


async def test_the_whole_bots_cap_holds_every_user(
    chat_server: ChatServer, active: Callable[..., Any], day: Clock
) -> None:
    service = active(batch_messages=1, recall=False)
    first, second = next(_users), next(_users)
    caps(bot=18, user=1000)
    chat_server.set_rule(NOTHING)
    with captured_logs("WARNING") as lines:
        await say(private_event(first, "一条消息"))
        await settle(service)
        replies = await say(private_event(second, "另一条消息"))
        await settle(service)
        replies = await say(private_event(second, "再一条"), recorder=replies)
        await settle(service)
    assert len(replies.texts("private")) == 2
    assert len(extractions(chat_server)) == 1
    assert service.queue.waiting(key(second)) == 2
    reached = [line for line in lines if "达到全局上限" in line]
    assert len(reached) == 1 and "[budget] background_tokens_per_day = 18" in reached[0]
    budget = (await usage_today())["budget"]
    assert budget["reached"] is True and budget["used_today"] == 18


class StuckSessions:
    """A database that never answers until ``release``: then it fails."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.opened = 0

    def __call__(self) -> Any:
        self.opened += 1
        return self

    async def __aenter__(self) -> Any:
        await self.gate.wait()
        raise ConnectionError("database down (test)")

    async def __aexit__(self, *exc: object) -> None:
        return None


async def test_chat_turns_never_wait_for_the_ledger(
    chat_server: ChatServer, active: Callable[..., Any], day: Clock
) -> None:
    from amrita_plugin_memory.storage.keys import user_key

    rt = runtime()
    service = active(batch_messages=1)
    uid = next(_users)
    await rt.memo.update(user_key(uid), "用户喜欢乌龙茶")
    caps(bot=10**9, user=10**9)  # a cap is on: the extraction must read the ledger first
    chat_server.set_rule(NOTHING)
    stuck, saved = StuckSessions(), rt.usage.sessions
    rt.usage.sessions = stuck
    try:
        async with asyncio.timeout(60):  # a hang guard: a turn that waited would never end
            replies = await say(private_event(uid, "我最喜欢乌龙茶"))
            replies = await say(private_event(uid, "今天喝什么好"), recorder=replies)
        assert len(replies.texts("private")) == 2
        assert stuck.opened >= 1  # the extraction is the one waiting on the database
        assert extractions(chat_server) == []
        assert rt.usage.pending(day.now.date().isoformat())[("chat", "")].requests == 2
    finally:
        rt.usage.sessions = saved
        stuck.gate.set()  # the waiting extraction sees a failed read: this process's figures
    await settle(service)
    assert len(extractions(chat_server)) >= 1
    assert (await usage_today())["blocks"]["today"]["turns"] == 2


async def test_persona_extraction_counts_for_the_speaker_and_stops_at_their_share(
    chat_server: ChatServer, groups: Callable[..., Any], day: Clock
) -> None:
    from tests.group_helpers import extraction_rule, is_extraction

    awareness = groups()
    gid, talker, quiet = "43901", next(_users), next(_users)
    awareness.observe(gid, str(talker), "甲", "我是一名医生")
    awareness.observe(gid, str(quiet), "乙", "我在学画画")
    chat_server.set_rule(extraction_rule(lambda _: {"updates": []}))
    caps(user=1)
    first = await awareness.extractor.run(group_view(gid), user_view(str(talker)))
    assert first.error == "" and first.analysed
    awareness.clock.now += 3600
    held = await awareness.extractor.run(group_view(gid), user_view(str(talker)))
    assert held.error == "budget" and held.analysed == []  # nobody marked as analysed
    other = await awareness.extractor.run(group_view(gid), user_view(str(quiet)))
    assert other.error == ""
    assert len([r for r in chat_server.requests if is_extraction(r)]) == 2
    usage = await usage_today()
    assert usage["today"]["persona"]["requests"] == 2
    assert await user_tokens(day, talker) == 18 and await user_tokens(day, quiet) == 18


async def test_an_l3_cycle_is_counted_and_a_cap_postpones_the_next_to_midnight(
    chat_server: ChatServer, day: Clock, tmp_path: Any
) -> None:
    from amrita_plugin_memory.subconscious import create_runner
    from tests.servers import Reply

    rt = runtime()
    uid = next(_users)
    sub = rt.config.file.subconscious.model_copy(
        update={"enabled": True, "target_user_id": str(uid), "enable_knowledge": False}
    )
    runner = create_runner(rt, sub, state_uid=f"usage-{uid}", config_dir=tmp_path / "config")
    try:
        chat_server.script(
            Reply.tool_call("subconscious_get_memory_stats", {}),
            Reply.tool_call("subconscious_iter_stop", {"summary": "看了一眼"}),
        )
        done = await runner.run_cycle()
        assert done.outcome == "success", done
        usage = await usage_today()
        assert usage["today"]["subconscious"] == {
            "requests": 2, "prompt_tokens": 22, "completion_tokens": 14, "cached_tokens": 0,
        }  # fmt: skip
        assert await user_tokens(day, uid) == 36

        caps(user=36)
        with captured_logs("INFO") as lines:
            held = await runner.run_cycle()
        assert held.outcome == "skipped" and held.error == "budget"
        midnight = datetime.combine(day.now.date() + timedelta(days=1), datetime.min.time())
        planned = runner.next_run_time
        assert planned is not None
        assert planned.astimezone(day.now.tzinfo) == midnight.replace(tzinfo=day.now.tzinfo)
        assert any(line.startswith("INFO [Subconscious]") and "推迟到" in line for line in lines), (
            lines
        )
        assert len(chat_server.requests) == 2  # the held cycle sent nothing
    finally:
        await runner.shutdown()
