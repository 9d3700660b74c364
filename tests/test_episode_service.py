"""The episodes service (``episodes/service.py``, issue #48) on a real database: lines
heard from the chat, the users' forgets and opt-outs applied before anything is stored,
ended conversations kept, and the ``<EPISODES>`` block of a message that asks about past
conversations, through the chat's own view (a private conversation never reaches a group).
The background model is a scripted plain function; the clock is given."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import view_of
from tests.lazy import lazy_import

pytestmark = pytest.mark.usefixtures("orm_db")

CAL = lazy_import("amrita_plugin_memory.core.calendar")
CS = lazy_import("amrita_plugin_memory.core.config_sections")
R = lazy_import("amrita_plugin_memory.core.records")
K = lazy_import("amrita_plugin_memory.storage.keys")
S = lazy_import("amrita_plugin_memory.storage.episodes.store")
SC = lazy_import("amrita_plugin_memory.storage.scope")
SV = lazy_import("amrita_plugin_memory.episodes.service")
REC = lazy_import("amrita_plugin_memory.episodes.recorder")

ZONE = timezone(timedelta(hours=8))
DAY1 = datetime(2026, 5, 28, 20, 0, tzinfo=ZONE).timestamp()
DAY2 = datetime(2026, 5, 29, 9, 0, tzinfo=ZONE).timestamp()
INTERVIEW = '{"summary": "用户说下周有个后端面试，二面是技术面，有点紧张", "topics": ["面试"]}'
HIKING = '{"summary": "群友约周末去香山爬山", "topics": ["爬山"]}'


class Clock:
    def __init__(self, at: float) -> None:
        self.at = at

    def __call__(self) -> float:
        return self.at


class Model:
    """A scripted ``complete``: answers in turn, requests kept."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.requests: list[list[dict[str, str]]] = []

    async def __call__(self, messages: list[dict[str, str]]) -> tuple[str, Any]:
        self.requests.append(messages)
        return self.answers.pop(0), None


class Consent:
    def __init__(self) -> None:
        self.off: set[str] = set()

    async def __call__(self, view: Any) -> bool:
        return view.user_id not in self.off


def fences(tmp_path: Path) -> Any:
    from amrita_plugin_memory.infra.fences import UserEpochs
    from amrita_plugin_memory.storage.shared.sessions import orm_session
    from amrita_plugin_memory.storage.users.fences import UserFences, VoidPoints
    from amrita_plugin_memory.storage.users.tombstones import ForgottenUsers

    return UserFences(
        UserEpochs(), ForgottenUsers.in_dir(tmp_path, orm_session), VoidPoints(orm_session)
    )


def service(tmp_path: Path, model: Model, clock: Clock, **config: Any) -> tuple[Any, Any]:
    consent = Consent()
    section = CS.EpisodesConfig(**config)
    built = SV.EpisodeService(
        S.EpisodeStore(),
        CAL.OwnerCalendar(zone=ZONE),
        lambda: section,
        fences(tmp_path),
        complete=model,
        allows=consent,
        clock=clock,
    )
    return built, consent


def private(user: str) -> Any:
    return K.target_from_ids(user)


def group(user: str, gid: str = "777") -> Any:
    return K.target_from_ids(user, gid)


def view(target: Any) -> Any:
    scope = SC.ScopeRules().of_turn(target)
    return scope.view("group") if scope.in_group else scope.view("user")


def talk(svc: Any, clock: Clock, target: Any, said: list[str], step: float = 60) -> None:
    """The user says each of ``said`` and the bot answers each, ``step`` seconds apart."""
    for text in said:
        svc.heard(target, "小明", text)
        clock.at += step
        svc.replied(target, "42", f"（回复）{text[:6]}")
        clock.at += step


PRIVATE_TALK = ["我下周有个面试，有点紧张", "是后端开发的岗位", "二面是技术面，要写代码"]


async def test_last_time_recalls_the_previous_conversation_not_the_one_going_on(
    tmp_path: Path,
) -> None:
    clock = Clock(DAY1)
    model = Model(INTERVIEW)
    svc, _ = service(tmp_path, model, clock)
    alice = private("10001")
    talk(svc, clock, alice, PRIVATE_TALK)
    clock.at = DAY2
    assert await svc.run_once() == 1  # flushed, the day ended: kept by the model's summary
    [request] = model.requests
    assert "我下周有个面试" in request[1]["content"]
    svc.heard(alice, "小明", "早上好")  # a new conversation begins
    block = await svc.block(view(alice), "上次我们聊了什么？")
    assert block.startswith("<EPISODES>") and "后端面试" in block
    assert "2026-05-28" in block and "20:00" in block  # the owner's local day and time
    assert "后端面试" in await svc.block(view(alice), "what did we talk about last time?")
    assert await svc.block(view(alice), "今天天气怎么样") == ""  # asks nothing: no block
    assert await svc.run_once() == 0  # the morning's conversation is still going on


async def test_a_private_conversation_never_reaches_a_group(tmp_path: Path) -> None:
    clock = Clock(DAY1)
    model = Model(INTERVIEW, HIKING)
    svc, _ = service(tmp_path, model, clock)
    talk(svc, clock, private("10001"), PRIVATE_TALK)
    room = group("10001")
    svc.heard(room, "小明", "周末去香山爬山吗")
    svc.heard(group("10002"), "小红", "好呀，我也去，几点出发")
    svc.heard(room, "小明", "早上八点山脚见")
    clock.at = DAY2
    assert await svc.run_once() == 2
    in_group = await svc.block(view(room), "昨天群里聊了什么？")
    assert "香山" in in_group and "面试" not in in_group
    in_private = await svc.block(view(private("10001")), "我们昨天聊了什么？")
    assert "面试" in in_private and "香山" not in in_private
    other_group = await svc.block(view(group("10001", "888")), "昨天群里聊了什么？")
    assert other_group == ""


async def test_an_opted_out_or_forgotten_users_lines_are_never_stored(tmp_path: Path) -> None:
    clock = Clock(DAY1)
    svc, consent = service(tmp_path, Model(), clock, summarize=False)
    room = group("10001")
    svc.heard(room, "小明", "我刚换了工作")
    svc.replied(room, "42", "恭喜你换了工作")
    svc.heard(group("10002"), "小红", "周末一起吃饭吧")
    consent.off.add("10001")  # /memory auto off before the flush
    await svc.recorder.flush()
    lines = await S.EpisodeStore().lines_of(K.group_key("777"), 50)
    assert [ln.text for ln in lines] == ["周末一起吃饭吧"]  # nor the bot's reply to him
    consent.off.clear()
    talk(svc, clock, private("10003"), ["我喜欢猫"])
    assert svc.forget("10003") == 2  # a forget in this process: the buffer drops them
    talk(svc, clock, private("10004"), ["我喜欢狗"])
    await svc.recorder.fences.forgotten.add(
        "10004", K.user_key("10004"), datetime.fromtimestamp(clock.at, ZONE)
    )  # a forget in another process, after the lines were said
    await svc.recorder.flush()
    assert await S.EpisodeStore().lines_of(K.user_key("10003"), 50) == []
    assert await S.EpisodeStore().lines_of(K.user_key("10004"), 50) == []


async def test_the_buffer_is_bounded_and_a_failed_flush_keeps_the_lines(
    tmp_path: Path,
) -> None:
    clock = Clock(DAY1)
    store = S.EpisodeStore()
    recorder = REC.EpisodeRecorder(store, fences(tmp_path), max_waiting=3)
    for i in range(5):
        recorder.heard(private("10001"), "", f"第{i}句", clock.at + i)
    assert (recorder.waiting, recorder.dropped) == (3, 2)

    async def broken(lines: Any) -> None:
        raise RuntimeError("disk full")

    store.add_lines = broken  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        await recorder.flush()
    assert recorder.waiting == 3
    del store.add_lines
    assert await recorder.flush() == 3
    lines = await store.lines_of(K.user_key("10001"), 10)
    assert [ln.text for ln in lines] == ["第2句", "第3句", "第4句"]


async def test_a_conversation_losing_lines_to_a_forget_while_closing_is_not_kept(
    tmp_path: Path,
) -> None:
    """The summary request is on its way when the user forgets: nothing of theirs is kept."""
    clock = Clock(DAY1)
    store = S.EpisodeStore()

    class Forgetting(Model):
        async def __call__(self, messages: list[dict[str, str]]) -> tuple[str, Any]:
            await store.drop_user_lines("10001", K.user_key("10001"))
            return await super().__call__(messages)

    model = Forgetting(INTERVIEW)
    svc, _ = service(tmp_path, model, clock)
    talk(svc, clock, private("10001"), PRIVATE_TALK)
    clock.at = DAY2
    assert await svc.run_once() == 0 and len(model.requests) == 1
    assert await store.of_chat_any(K.user_key("10001")) == []
    assert await store.open_chats(10) == []


async def test_switched_off_nothing_is_heard_closed_or_recalled(tmp_path: Path) -> None:
    clock = Clock(DAY1)
    svc, _ = service(tmp_path, Model(), clock, enabled=False)
    talk(svc, clock, private("10001"), PRIVATE_TALK)
    assert svc.recorder.waiting == 0
    assert await svc.block(view(private("10001")), "上次我们聊了什么？") == ""
    assert await svc.run_once() == 0


async def test_a_group_managers_view_is_not_a_door_to_private_episodes(tmp_path: Path) -> None:
    """Even an operator view of the user's partition in a group origin filter: the
    private episode has origin ``private``, the group view's partition is the group's."""
    clock = Clock(DAY1)
    svc, _ = service(tmp_path, Model(INTERVIEW), clock)
    talk(svc, clock, private("10001"), PRIVATE_TALK)
    clock.at = DAY2
    await svc.run_once()
    only_group = SC.View(K.user_key("10001"), R.OriginFilter.only("group:777"))
    assert await svc.recall.block(only_group, "上次我们聊了什么？", clock.at) == ""
    assert await svc.recall.block(view_of(K.user_key("10001")), "上次聊了什么", clock.at)
