"""The episode closer (``episodes/closer.py``, issue #48) on a real database: ended
conversations become episodes, summarised by the background model (a scripted plain
function here), extracted when it fails, answers junk or is not asked (a short chat, the
budget spent); a conversation still going on stays waiting."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from tests.helpers import view_of
from tests.lazy import lazy_import

pytestmark = pytest.mark.usefixtures("orm_db")

C = lazy_import("amrita_plugin_memory.core.config")
CAL = lazy_import("amrita_plugin_memory.core.calendar")
CS = lazy_import("amrita_plugin_memory.core.config_sections")
E = lazy_import("amrita_plugin_memory.core.episodes")
K = lazy_import("amrita_plugin_memory.storage.keys")
S = lazy_import("amrita_plugin_memory.storage.episodes.store")
U = lazy_import("amrita_plugin_memory.storage.usage")
CL = lazy_import("amrita_plugin_memory.episodes.closer")

ZONE = timezone(timedelta(hours=8))
T0 = datetime(2026, 5, 28, 10, 0, tzinfo=ZONE).timestamp()
LATER = T0 + 3 * 3600  # every conversation below is idle by then
GOOD = '{"summary": "用户聊了下周的面试，有点紧张", "topics": ["面试"]}'


class Model:
    """A scripted ``complete``: answers in turn (an exception is raised), requests kept."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.requests: list[list[dict[str, str]]] = []

    async def __call__(self, messages: list[dict[str, str]]) -> tuple[str, Any]:
        self.requests.append(messages)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer, None


def calendar() -> Any:
    return CAL.OwnerCalendar(zone=ZONE)


def closer(model: Any, budget: Any = None, **config: Any) -> Any:
    return CL.EpisodeCloser(
        S.EpisodeStore(), calendar(), CS.EpisodesConfig(**config), model, budget
    )


def private_chat(user: str, start: float, n: int = 4) -> list[Any]:
    chat = K.user_key(user)
    texts = ["我下周有个面试", "是什么工作？", "后端开发，第二轮是技术面", "加油，你准备得很充分"]
    return [
        E.EpisodeLine(
            chat=chat, origin="private", user_id="42" if i % 2 else user,
            text=texts[i % 4], at=start + 60 * i, is_bot=bool(i % 2),
        )
        for i in range(n)
    ]  # fmt: skip


async def test_a_model_episode_then_nothing_waits() -> None:
    store = S.EpisodeStore()
    await store.add_lines(private_chat("10001", T0))
    model = Model(GOOD)
    work = closer(model)
    assert await work.run_once(LATER) == 1
    [request] = model.requests
    assert "[episode-summary]" in request[0]["content"]
    assert "10:00 用户：我下周有个面试" in request[1]["content"]
    assert "10:01 你：是什么工作？" in request[1]["content"]
    [episode] = await store.recent(view_of(K.user_key("10001")), 10)
    assert episode.source == "model" and episode.summary.startswith("用户聊了下周的面试")
    assert episode.topics == ("面试",) and episode.participants == ("10001",)
    assert (episode.start, episode.end, episode.messages) == (T0, T0 + 180, 4)
    assert episode.day == "2026-05-28" and episode.chars == sum(
        len(ln.text) for ln in private_chat("10001", T0)
    )
    assert await store.open_chats(10) == []
    assert await work.run_once(LATER) == 0 and len(model.requests) == 1


@pytest.mark.parametrize(
    "answer", ["抱歉，我无法总结。", '{"topics": ["x"]}', RuntimeError("down")]
)
async def test_junk_or_a_failure_keeps_an_extractive_episode(answer: Any) -> None:
    store = S.EpisodeStore()
    await store.add_lines(private_chat("10001", T0))
    model = Model(answer)
    assert await closer(model).run_once(LATER) == 1
    assert len(model.requests) == 1
    [episode] = await store.recent(view_of(K.user_key("10001")), 10)
    assert episode.source == "extract" and "面试" in episode.summary


async def test_a_short_chat_gets_no_request() -> None:
    store = S.EpisodeStore()
    await store.add_lines(private_chat("10001", T0, n=2))
    model = Model()
    work = closer(model)
    assert await work.run_once(LATER) == 1
    assert model.requests == [] and work.outcomes == {"short": 1}
    [episode] = await store.recent(view_of(K.user_key("10001")), 10)
    assert episode.source == "extract" and episode.messages == 2


async def test_summarize_off_sends_nothing() -> None:
    store = S.EpisodeStore()
    await store.add_lines(private_chat("10001", T0))
    model = Model()
    assert await closer(model, summarize=False).run_once(LATER) == 1
    assert model.requests == []


async def test_an_open_conversation_waits_and_an_idle_gap_splits() -> None:
    store = S.EpisodeStore()
    await store.add_lines(private_chat("10001", T0) + private_chat("10001", T0 + 7200, n=3))
    model = Model(GOOD)
    work = closer(model)
    now = T0 + 7200 + 200  # the second conversation is still going on
    assert await work.run_once(now) == 1
    [episode] = await store.recent(view_of(K.user_key("10001")), 10)
    assert episode.end == T0 + 180
    [waiting] = await store.open_chats(10)
    assert (waiting.lines, waiting.first) == (3, T0 + 7200)
    assert await work.run_once(now + 60) == 0  # nothing ended: not even read


async def test_a_group_conversation_names_its_members_and_never_the_bot() -> None:
    store = S.EpisodeStore()
    chat = K.group_key("777")
    origin = "group:777"
    said = [("1", "Alice", "周末去爬山吗"), ("42", "", "好呀"), ("2", "Bob", "我也去，爬香山")]
    await store.add_lines(
        [
            E.EpisodeLine(chat=chat, origin=origin, user_id=u, name=n, text=t,
                          at=T0 + i, is_bot=u == "42")
            for i, (u, n, t) in enumerate(said)
        ]
    )  # fmt: skip
    model = Model(GOOD)
    assert await closer(model).run_once(LATER) == 1
    body = model.requests[0][1]["content"]
    assert "Alice" in body and "Bob" in body and "你：好呀" in body
    [episode] = await store.of_chat_any(chat)
    assert episode.participants == ("1", "2") and episode.origin == origin


async def test_the_budget_holds_the_request_and_the_spend_is_recorded() -> None:
    ledger = U.UsageLedger(calendar())
    budget = U.BackgroundBudget(C.BudgetConfig(background_tokens_per_day=1), ledger)
    store = S.EpisodeStore()
    await store.add_lines(private_chat("10001", T0) + private_chat("10002", T0))
    model = Model(GOOD, GOOD)
    work = closer(model, budget)
    assert await work.run_once(LATER) == 2
    assert len(model.requests) == 1  # the first one spent the day's tokens
    assert work.outcomes == {"model": 1, "budget": 1}
    day = ledger.day_of(ledger.now())
    used = await ledger.spent_by_all(day)
    assert used > 0
