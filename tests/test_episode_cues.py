"""Which messages ask about past conversations (issue #48): ``episode_question``."""

from __future__ import annotations

from datetime import date, datetime
from zoneinfo import ZoneInfo

import pytest

from tests.lazy import lazy_import

C = lazy_import("amrita_plugin_memory.ranking.episode_cues")
W = lazy_import("amrita_plugin_memory.ranking.when")

NOW = datetime(2026, 12, 4, 15, 0, tzinfo=ZoneInfo("Asia/Shanghai"))  # a Friday

KINDS = [
    ("上次我们聊了什么", "last"),
    ("上回聊到哪了", "last"),
    ("上次说的面试怎么样了", "last"),
    ("我们第一次聊天说了啥", "first"),
    ("our first chat", "first"),
    ("昨天群里聊了什么", "period"),
    ("上周三我们聊了啥", "period"),
    ("what did we talk about last time", "last"),
    ("What were we discussing last time?", "last"),
    ("what did we chat about the last time", "last"),
    ("last time we talked", "last"),
    ("what did we discuss yesterday", "period"),
    ("之前聊的那个电影", "topic"),
    ("你还记得我们聊过猫吗", "topic"),
    ("remember when we talked about hiking?", "topic"),
    ("you mentioned a good book about Rome", "topic"),
    # a group's own phrasings
    ("上次群里聊了什么？", "last"),
    ("上回大家在群里聊的啥？", "last"),
    ("群里第一次聊天说了啥", "first"),
    ("What did the group talk about last time?", "last"),
    ("What was this group's first chat about?", "first"),
    ("what did everyone talk about last time", "last"),
]

NOTHING = [
    "上次考试我考了90分",
    "明天聊",
    "下次再说",
    "我昨天吃了火锅",
    "what did I eat yesterday",
    "我们聊聊天吧",
    "天气怎么样",
    "last time I went to the gym",
    "我上次去群里看了看",
    "上次群里抽奖我中了",
    "the group went hiking last time",
    "everyone was late last time",
    "你还记得我的狗吗",
    "你还记得我们聊过什么吗",  # a cue, but no subject to match: nothing to look for
    "",
]


@pytest.mark.parametrize(("text", "kind"), KINDS)
def test_conversation_questions(text: str, kind: str) -> None:
    ask = C.episode_question(text, NOW)
    assert ask is not None and ask.kind == kind, (text, ask)
    assert (ask.period is not None) == (kind == "period")


@pytest.mark.parametrize("text", NOTHING)
def test_not_conversation_questions(text: str) -> None:
    assert C.episode_question(text, NOW) is None


def test_topic_terms_leave_out_cue_time_and_question_words() -> None:
    assert C.episode_question("上次说的面试怎么样了", NOW).topic_terms == ("面试",)
    assert C.episode_question("上次我们聊了什么", NOW).topic_terms == ()
    assert C.episode_question("昨天群里聊了什么", NOW).topic_terms == ()
    assert C.episode_question("之前聊的那个电影", NOW).topic_terms == ("电影",)
    ask = C.episode_question("what did we talk about the interviews yesterday", NOW)
    assert ask.kind == "period" and ask.topic_terms == ("interview",)  # stemmed
    assert ask.period.first == date(2026, 12, 3) == ask.period.last
    assert C.content_terms("我们聊了123和456") == ()  # pure numbers are no subject


def test_period_is_the_named_one_in_the_owner_zone() -> None:
    ask = C.episode_question("昨天群里聊了什么", NOW)
    assert ask.period == W.named_period("昨天群里聊了什么", NOW)
    assert ask.period.start.tzinfo is NOW.tzinfo
