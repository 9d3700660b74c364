"""Which past conversations answer a question (issue #48): ``pick_episodes``."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from tests.lazy import lazy_import

C = lazy_import("amrita_plugin_memory.ranking.episode_cues")
P = lazy_import("amrita_plugin_memory.ranking.episode_pick")
E = lazy_import("amrita_plugin_memory.core.episodes")

ZONE = ZoneInfo("Asia/Shanghai")
NOW = datetime(2026, 12, 4, 15, 0, tzinfo=ZONE)


def _at(day: int, hour: int) -> float:
    return datetime(2026, 12, day, hour, 0, tzinfo=ZONE).timestamp()


def _ep(key: str, day: int, hour: int, summary: str, topics: tuple[str, ...] = ()) -> object:
    return E.EpisodeRecord(
        id=key,
        chat="c",
        origin="private",
        start=_at(day, hour),
        end=_at(day, hour) + 1800,
        day=f"2026-12-{day:02d}",
        participants=("1",),
        summary=summary,
        topics=topics,
    )


def _episodes() -> list[object]:
    return [
        _ep("a", 1, 10, "用户_1234：我下周要面试，有点紧张", ("面试", "紧张")),
        _ep("b", 2, 20, "用户_1234：周末去爬山，天气不错", ("爬山",)),
        _ep("c", 3, 9, "用户_1234：早上吃了火锅", ("火锅",)),
        _ep("d", 3, 21, "Alice: we talked about the new job offer", ("job", "offer")),
    ]


def _current() -> object:
    return _ep("now", 4, 14, "用户_1234：今天聊面试结果", ("面试",))  # ends after `before`


BEFORE = _at(4, 14) + 60


def _pick(text: str, limit: int = 3, episodes: list[object] | None = None) -> list[str]:
    ask = C.episode_question(text, NOW)
    assert ask is not None, text
    found = P.pick_episodes(
        [*_episodes(), _current()] if episodes is None else episodes,
        ask,
        before=BEFORE,
        limit=limit,
    )
    return [e.id for e in found]


def test_last_is_the_latest_before_the_current_conversation() -> None:
    assert _pick("上次我们聊了什么") == ["d"]
    assert _pick("what did we talk about last time") == ["d"]


def test_last_with_a_topic_is_the_latest_where_it_came_up() -> None:
    assert _pick("上次说的面试怎么样了") == ["a"]
    assert _pick("上次说的那件事怎么样了") == ["d"]  # no matching term: the latest


def test_first_is_the_earliest() -> None:
    assert _pick("我们第一次聊天说了啥") == ["a"]


def test_period_overlapping_newest_kept_shown_oldest_first() -> None:
    assert _pick("昨天群里聊了什么") == ["c", "d"]
    assert _pick("昨天群里聊了什么", limit=1) == ["d"]
    assert _pick("昨天我们聊的火锅", limit=1) == ["c"]  # the matching one first
    assert _pick("上周我们聊了什么") == []


def test_topic_needs_a_real_overlap() -> None:
    assert _pick("你还记得我们聊过爬山吗") == ["b"]
    assert _pick("remember when we talked about the job offer?") == ["d"]
    assert _pick("你还记得我们聊过量子力学吗") == []


def test_share_floor() -> None:
    ep = _episodes()[0]
    assert P.topic_share(ep, ("面试",)) == 1.0
    assert P.topic_share(ep, ("面试", "北京", "出差")) == 1 / 3
    assert P.topic_share(ep, ("面试", "北京", "出差", "酒店")) == 0.0  # one term in four
    assert P.topic_share(ep, ()) == 0.0


def test_nothing_before_and_zero_limit() -> None:
    ask = C.episode_question("上次我们聊了什么", NOW)
    assert P.pick_episodes([_current()], ask, before=BEFORE, limit=3) == []
    assert P.pick_episodes(_episodes(), ask, before=BEFORE, limit=0) == []


def test_deterministic_whatever_the_input_order() -> None:
    shuffled = list(reversed(_episodes()))
    assert _pick("昨天群里聊了什么", episodes=shuffled) == ["c", "d"]
