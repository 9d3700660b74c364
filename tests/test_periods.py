"""Periods named in words, in both languages, relative to the moment a message was sent.

``named_period`` is pure: each case is a message, the owner's local ``now`` and the
span it names. The ``now`` values cover a Friday at 07:30 Beijing time (the UTC day
is the day before), a Sunday just after midnight at a month boundary, 1 March of a
leap year, New Year's night, a Sunday in New York and a Tuesday in Berlin. Future
phrases name nothing, and so do the look-alikes ("周到", "May I", "最近的地铁站").
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tests.lazy import lazy_import

W = lazy_import("amrita_plugin_memory.ranking.when")

SHANGHAI = ZoneInfo("Asia/Shanghai")
NOWS = {
    "FRI": datetime(2026, 12, 4, 7, 30, tzinfo=SHANGHAI),  # a Friday; UTC is still 3 December
    "SUN": datetime(2026, 3, 1, 0, 15, tzinfo=SHANGHAI),  # a Sunday, first of the month
    "LEAP": datetime(2024, 3, 1, 6, 0, tzinfo=SHANGHAI),  # a Friday after 29 February
    "NEWYEAR": datetime(2026, 1, 1, 1, 0, tzinfo=SHANGHAI),  # a Thursday
    "NY": datetime(2026, 11, 15, 14, 0, tzinfo=ZoneInfo("America/New_York")),  # a Sunday
    "TUE": datetime(2026, 3, 10, 10, 0, tzinfo=ZoneInfo("Europe/Berlin")),
}

# (now, message, expected): "YYYY-MM-DD" one day, "A..B" whole days A to B, "AThh:mm..BThh:mm"
# the hours between, "first" / "last" the first / last chat, None nothing.
ZH = [
    ("FRI", "今天我吃了什么", "2026-12-04"),
    ("FRI", "昨天我说了什么", "2026-12-03"),
    ("FRI", "前天", "2026-12-02"),
    ("FRI", "大前天去了哪", "2026-12-01"),
    ("FRI", "三天前", "2026-12-01"),
    ("FRI", "两天前我在干嘛", "2026-12-02"),
    ("FRI", "十天前", "2026-11-24"),
    ("FRI", "二十一天前", "2026-11-13"),
    ("FRI", "几天前", "2026-11-28..2026-12-02"),
    ("FRI", "前几天我跟你说的那家店", "2026-11-28..2026-12-02"),
    ("FRI", "这几天我睡得怎么样", "2026-12-02..2026-12-04"),
    ("FRI", "最近我在忙什么", "2026-11-28..2026-12-04"),
    ("FRI", "我最近的体检结果怎么样", "2026-11-28..2026-12-04"),
    ("FRI", "最近的地铁站在哪", None),
    ("FRI", "离公司最近的咖啡馆", None),
    ("FRI", "我最近一次去医院是什么时候", None),
    ("FRI", "今天早上我说了什么", "2026-12-04T05:00..2026-12-04T09:00"),
    ("FRI", "今天下午我要干嘛", None),
    ("FRI", "昨天晚上", "2026-12-03T18:00..2026-12-04T00:00"),
    ("FRI", "昨晚我们聊了什么", "2026-12-03T18:00..2026-12-04T00:00"),
    ("FRI", "昨天下午", "2026-12-03T12:00..2026-12-03T18:00"),
    ("FRI", "前天中午吃的什么", "2026-12-02T11:00..2026-12-02T14:00"),
    ("FRI", "今早", "2026-12-04T05:00..2026-12-04T09:00"),
    ("FRI", "今晚我要干嘛", None),
    ("FRI", "早上我说了什么", "2026-12-04T05:00..2026-12-04T09:00"),
    ("FRI", "晚上我说过什么", "2026-12-03T18:00..2026-12-04T00:00"),
    ("FRI", "上午我提到的那本书", "2026-12-04T05:00..2026-12-04T12:00"),
    ("FRI", "凌晨我发了什么", "2026-12-04T00:00..2026-12-04T05:00"),
    ("FRI", "我每天早上几点起床", None),
    ("FRI", "早上好", None),
    ("FRI", "下午茶去哪喝", None),
    ("FRI", "刚才我说了什么", "2026-12-04T05:30..2026-12-04T07:30"),
    ("FRI", "刚刚你说的", "2026-12-04T05:30..2026-12-04T07:30"),
    ("FRI", "温度刚刚好", None),
    ("FRI", "这周我做了什么", "2026-11-30..2026-12-04"),
    ("FRI", "本周", "2026-11-30..2026-12-04"),
    ("FRI", "这个星期", "2026-11-30..2026-12-04"),
    ("FRI", "这星期天气怎么样", "2026-11-30..2026-12-04"),
    ("FRI", "上周我去了哪里", "2026-11-23..2026-11-29"),
    ("FRI", "上个星期", "2026-11-23..2026-11-29"),
    ("FRI", "上礼拜", "2026-11-23..2026-11-29"),
    ("FRI", "上上周", "2026-11-16..2026-11-22"),
    ("FRI", "一周前", "2026-11-23..2026-11-29"),
    ("FRI", "两个星期前", "2026-11-16..2026-11-22"),
    ("FRI", "上周末我干嘛了", "2026-11-28..2026-11-29"),
    ("FRI", "上个周末", "2026-11-28..2026-11-29"),
    ("FRI", "这周末", None),
    ("FRI", "周三我说了什么", "2026-12-02"),
    ("FRI", "星期三", "2026-12-02"),
    ("FRI", "礼拜三", "2026-12-02"),
    ("FRI", "周五", "2026-12-04"),
    ("FRI", "周六", "2026-11-28"),
    ("FRI", "周日", "2026-11-29"),
    ("FRI", "周天", "2026-11-29"),
    ("FRI", "星期天", "2026-11-29"),
    ("FRI", "礼拜天", "2026-11-29"),
    ("FRI", "星期日", "2026-11-29"),
    ("FRI", "上周三", "2026-11-25"),
    ("FRI", "上周三下午", "2026-11-25T12:00..2026-11-25T18:00"),
    ("FRI", "这周三", "2026-12-02"),
    ("FRI", "本周五", "2026-12-04"),
    ("FRI", "这周六", None),
    ("FRI", "周三下午", "2026-12-02T12:00..2026-12-02T18:00"),
    ("FRI", "上上周五", "2026-11-20"),
    ("FRI", "这个月", "2026-12-01..2026-12-04"),
    ("FRI", "本月", "2026-12-01..2026-12-04"),
    ("FRI", "上个月", "2026-11-01..2026-11-30"),
    ("FRI", "上月", "2026-11-01..2026-11-30"),
    ("FRI", "上上个月", "2026-10-01..2026-10-31"),
    ("FRI", "十月份我去了哪", "2026-10-01..2026-10-31"),
    ("FRI", "十二月", "2026-12-01..2026-12-04"),
    ("FRI", "三月", "2026-03-01..2026-03-31"),
    ("FRI", "10月", "2026-10-01..2026-10-31"),
    ("FRI", "三个月前", "2026-09-01..2026-09-30"),
    ("FRI", "今年", "2026-01-01..2026-12-04"),
    ("FRI", "去年", "2025-01-01..2025-12-31"),
    ("FRI", "前年", "2024-01-01..2024-12-31"),
    ("FRI", "2023年我在哪工作", "2023-01-01..2023-12-31"),
    ("FRI", "二〇二三年", "2023-01-01..2023-12-31"),
    ("FRI", "2027年", None),
    ("FRI", "2023年5月", "2023-05-01..2023-05-31"),
    ("FRI", "去年十月", "2025-10-01..2025-10-31"),
    ("FRI", "今年三月", "2026-03-01..2026-03-31"),
    ("FRI", "2023年5月2日", "2023-05-02"),
    ("FRI", "5月2号", "2026-05-02"),
    ("FRI", "十二月二十五日", "2025-12-25"),
    ("FRI", "十月三号", "2026-10-03"),
    ("FRI", "3月5日晚上", "2026-03-05T18:00..2026-03-06T00:00"),
    ("FRI", "上个月5号", "2026-11-05"),
    ("FRI", "这个月3号", "2026-12-03"),
    ("FRI", "这个月10号", None),
    ("FRI", "两年前", "2024-01-01..2024-12-31"),
    ("FRI", "2023-05-02 那天", "2023-05-02"),
    ("FRI", "我们第一次聊天的时候", "first"),
    ("FRI", "你还记得我们第一次对话吗", "first"),
    ("FRI", "上次聊天你说了什么", "last"),
    ("FRI", "上回我跟你说的那件事", "last"),
    ("FRI", "上一次聊天", "last"),
    ("FRI", "上次你说的那本书", "last"),
    ("FRI", "上次我去医院是什么时候", None),
    ("FRI", "明天", None),
    ("FRI", "明天早上我要干嘛", None),
    ("FRI", "后天", None),
    ("FRI", "下周", None),
    ("FRI", "下周三", None),
    ("FRI", "下个星期", None),
    ("FRI", "下个月", None),
    ("FRI", "明年三月", None),
    ("FRI", "三天后", None),
    ("FRI", "下周末", None),
    ("FRI", "我昨天说明天要去哪", "2026-12-03"),
    ("FRI", "服务很周到", None),
    ("FRI", "一周年纪念日是哪天", None),
    ("FRI", "星期天气", None),
    ("FRI", "每周三", None),
    ("FRI", "一周一次", None),
    ("FRI", "我周一到周五几点上班", None),
    ("FRI", "五月天的演唱会", None),
    ("FRI", "我的狗叫什么名字", None),
    ("FRI", "我曾看过《银河补习班》，那一天的具体日期是？", None),
    ("FRI", "2月30号", None),
    ("FRI", "帮我看一下周三的记录", "2026-12-02"),
    ("FRI", "上週三", "2026-11-25"),
    ("FRI", "這個月", "2026-12-01..2026-12-04"),
    ("FRI", "５月２号", "2026-05-02"),
    ("FRI", "说好的三个月", None),
    ("FRI", "我坐3号线去公司", None),
    ("FRI", "平时晚上我做什么", None),
    ("FRI", "前两天", "2026-11-28..2026-12-02"),
    ("FRI", "前些日子", "2026-11-04..2026-12-01"),
    ("FRI", "昨天深夜", "2026-12-03T18:00..2026-12-04T00:00"),
    ("FRI", "半夜我说了什么", "2026-12-04T00:00..2026-12-04T05:00"),
    ("FRI", "我 yesterday 说了什么", "2026-12-03"),
    ("SUN", "昨天", "2026-02-28"),
    ("SUN", "上个月", "2026-02-01..2026-02-28"),
    ("SUN", "这周", "2026-02-23..2026-03-01"),
    ("SUN", "上周", "2026-02-16..2026-02-22"),
    ("SUN", "周日", "2026-03-01"),
    ("SUN", "上周日", "2026-02-22"),
    ("SUN", "这周末", "2026-02-28..2026-03-01"),
    ("SUN", "上周末", "2026-02-21..2026-02-22"),
    ("SUN", "2月29号", "2024-02-29"),
    ("SUN", "刚才", "2026-02-28T22:15..2026-03-01T00:15"),
    ("SUN", "三月", "2026-03-01"),
    ("SUN", "二月份", "2026-02-01..2026-02-28"),
    ("SUN", "晚上我说了什么", "2026-02-28T18:00..2026-03-01T00:00"),
    ("SUN", "凌晨", "2026-03-01T00:00..2026-03-01T05:00"),
    ("SUN", "周六", "2026-02-28"),
    ("SUN", "这个月", "2026-03-01"),
    ("LEAP", "昨天", "2024-02-29"),
    ("LEAP", "上个月", "2024-02-01..2024-02-29"),
    ("LEAP", "2月29号", "2024-02-29"),
    ("LEAP", "前天", "2024-02-28"),
    ("LEAP", "上周四", "2024-02-22"),
    ("LEAP", "周四", "2024-02-29"),
    ("NEWYEAR", "昨天", "2025-12-31"),
    ("NEWYEAR", "去年", "2025-01-01..2025-12-31"),
    ("NEWYEAR", "今年", "2026-01-01"),
    ("NEWYEAR", "上个月", "2025-12-01..2025-12-31"),
    ("NEWYEAR", "十二月", "2025-12-01..2025-12-31"),
    ("NEWYEAR", "这周", "2025-12-29..2026-01-01"),
    ("NEWYEAR", "上周", "2025-12-22..2025-12-28"),
    ("NEWYEAR", "刚才", "2025-12-31T23:00..2026-01-01T01:00"),
    ("NEWYEAR", "昨晚", "2025-12-31T18:00..2026-01-01T00:00"),
    ("NEWYEAR", "12月31号", "2025-12-31"),
    ("NEWYEAR", "1月1号", "2026-01-01"),
    ("NEWYEAR", "1月2号", "2025-01-02"),
    ("NY", "十月份", "2026-10-01..2026-10-31"),
    ("NY", "上周日", "2026-11-08"),
    ("TUE", "十月份", "2025-10-01..2025-10-31"),
    ("TUE", "三月", "2026-03-01..2026-03-10"),
    ("TUE", "周三", "2026-03-04"),
    ("TUE", "这周三", None),
    ("TUE", "上周三", "2026-03-04"),
    ("TUE", "周二", "2026-03-10"),
    ("TUE", "上周二", "2026-03-03"),
]
EN = [
    ("FRI", "What did I say today?", "2026-12-04"),
    ("FRI", "What did I eat yesterday?", "2026-12-03"),
    ("FRI", "What did I do the day before yesterday?", "2026-12-02"),
    ("FRI", "yesterday afternoon", "2026-12-03T12:00..2026-12-03T18:00"),
    ("FRI", "What did I cook yesterday morning?", "2026-12-03T05:00..2026-12-03T12:00"),
    ("FRI", "What did I say this morning?", "2026-12-04T05:00..2026-12-04T12:00"),
    ("FRI", "What did we talk about last night?", "2026-12-03T18:00..2026-12-04T00:00"),
    ("FRI", "What am I doing tonight?", None),
    ("FRI", "this afternoon", None),
    ("FRI", "3 days ago", "2026-12-01"),
    ("FRI", "three days ago", "2026-12-01"),
    ("FRI", "a day ago", "2026-12-03"),
    ("FRI", "a few days ago", "2026-11-28..2026-12-02"),
    ("FRI", "the other day", "2026-11-28..2026-12-02"),
    ("FRI", "a couple of days ago", "2026-12-01..2026-12-02"),
    ("FRI", "several days ago", "2026-11-28..2026-12-02"),
    ("FRI", "a week ago", "2026-11-23..2026-11-29"),
    ("FRI", "two weeks ago", "2026-11-16..2026-11-22"),
    ("FRI", "a month ago", "2026-11-01..2026-11-30"),
    ("FRI", "a year ago", "2025-01-01..2025-12-31"),
    ("FRI", "What did I buy recently?", "2026-11-28..2026-12-04"),
    ("FRI", "What have I been reading lately?", "2026-11-28..2026-12-04"),
    ("FRI", "the past 3 days", "2026-12-02..2026-12-04"),
    ("FRI", "in the past week", "2026-11-28..2026-12-04"),
    ("FRI", "over the last few days", "2026-12-02..2026-12-04"),
    ("FRI", "the last days of summer", None),
    ("FRI", "this week", "2026-11-30..2026-12-04"),
    ("FRI", "What did she do last week?", "2026-11-23..2026-11-29"),
    ("FRI", "the week before last", "2026-11-16..2026-11-22"),
    ("FRI", "last weekend", "2026-11-28..2026-11-29"),
    ("FRI", "this weekend", None),
    ("FRI", "What did I do over the weekend?", "2026-11-28..2026-11-29"),
    ("FRI", "my weekend plans", None),
    ("FRI", "on Monday", "2026-11-30"),
    ("FRI", "last Monday", "2026-11-30"),
    ("FRI", "What did I say on Wednesday?", "2026-12-02"),
    ("FRI", "last Friday", "2026-11-27"),
    ("FRI", "on Friday", "2026-12-04"),
    ("FRI", "this Saturday", None),
    ("FRI", "Tuesday evening", "2026-12-01T18:00..2026-12-02T00:00"),
    ("FRI", "every Monday", None),
    ("FRI", "on Mondays", None),
    ("FRI", "this month", "2026-12-01..2026-12-04"),
    ("FRI", "last month", "2026-11-01..2026-11-30"),
    ("FRI", "the month before last", "2026-10-01..2026-10-31"),
    ("FRI", "in October", "2026-10-01..2026-10-31"),
    ("FRI", "in December", "2026-12-01..2026-12-04"),
    ("FRI", "last December", "2025-12-01..2025-12-31"),
    ("FRI", "back in March", "2026-03-01..2026-03-31"),
    ("FRI", "When did Melanie go camping in June?", "2026-06-01..2026-06-30"),
    ("FRI", "during the summer", None),
    ("FRI", "this year", "2026-01-01..2026-12-04"),
    ("FRI", "last year", "2025-01-01..2025-12-31"),
    ("FRI", "in 2023", "2023-01-01..2023-12-31"),
    ("FRI", "in 2027", None),
    ("FRI", "on May 5", "2026-05-05"),
    ("FRI", "on the 5th of May", "2026-05-05"),
    ("FRI", "October 13", "2026-10-13"),
    ("FRI", "December 25", "2025-12-25"),
    ("FRI", "What did I do on Feb 30?", None),
    ("FRI", "What did Maria do on 7 July, 2023?", "2023-07-07"),
    ("FRI", "What did she paint on October 13, 2023?", "2023-10-13"),
    ("FRI", "Which book on 8th December, 2023?", "2023-12-08"),
    ("FRI", "What class did she start in December 2023?", "2023-12-01..2023-12-31"),
    ("FRI", "2024-02-29", "2024-02-29"),
    ("FRI", "What did I say just now?", "2026-12-04T05:30..2026-12-04T07:30"),
    ("FRI", "a moment ago", "2026-12-04T05:30..2026-12-04T07:30"),
    ("FRI", "the last time we talked", "last"),
    ("FRI", "what did we talk about last time", "last"),
    ("FRI", "What were we discussing last time?", "last"),
    ("FRI", "what did we chat about the last time", "last"),
    ("FRI", "what did you tell me last time", "last"),
    ("FRI", "last time I went to the gym", None),
    ("FRI", "we can talk about it next time", None),
    ("FRI", "our last conversation", "last"),
    ("FRI", "the first time we talked", "first"),
    ("FRI", "our first chat", "first"),
    ("FRI", "next week", None),
    ("FRI", "next Monday", None),
    ("FRI", "tomorrow morning", None),
    ("FRI", "the day after tomorrow", None),
    ("FRI", "in two weeks", None),
    ("FRI", "next October", None),
    ("FRI", "May I ask what my cat is called?", None),
    ("FRI", "march on", None),
    ("FRI", "What did I plant in march?", "2026-03-01..2026-03-31"),
    ("FRI", "I ran 5 miles in march 3 times", None),
    ("FRI", "Wait a second", None),
    ("FRI", "the second time", None),
    ("FRI", "What is my dog's name?", None),
    ("NY", "in October", "2026-10-01..2026-10-31"),
    ("NY", "today", "2026-11-15"),
    ("NY", "on Sunday", "2026-11-15"),
    ("NY", "last Sunday", "2026-11-08"),
    ("NY", "over the weekend", "2026-11-14..2026-11-15"),
    ("NY", "last weekend", "2026-11-07..2026-11-08"),
    ("NY", "this week", "2026-11-09..2026-11-15"),
    ("TUE", "in October", "2025-10-01..2025-10-31"),
    ("TUE", "last March", "2025-03-01..2025-03-31"),
    ("TUE", "last Wednesday", "2026-03-04"),
    ("TUE", "this Wednesday", None),
    ("TUE", "last Tuesday", "2026-03-03"),
    ("TUE", "on Tuesday", "2026-03-10"),
]


def _expected(now: datetime, spec: str | None) -> Any:
    if spec is None:
        return None
    if spec in ("first", "last"):
        return W.FIRST_CHAT if spec == "first" else W.LAST_CHAT
    zone = now.tzinfo
    assert zone is not None
    first, _, last = spec.partition("..")
    if "T" in first:
        start, end = datetime.fromisoformat(first), datetime.fromisoformat(last)
        return W.Period(start.replace(tzinfo=zone), end.replace(tzinfo=zone))
    return W.Period.of_days(date.fromisoformat(first), date.fromisoformat(last or first), zone)


@pytest.mark.parametrize(("now", "text", "spec"), ZH + EN, ids=[f"{n}:{t}" for n, t, _ in ZH + EN])
def test_named_period(now: str, text: str, spec: str | None) -> None:
    moment = NOWS[now]
    found = W.named_period(text, moment)
    assert found == _expected(moment, spec), (text, found)
    if isinstance(found, W.Period):  # in now's own zone, never UTC
        assert found.start.tzinfo is moment.tzinfo and found.end.tzinfo is moment.tzinfo


def test_the_table_is_large_enough_in_both_languages() -> None:
    assert len(ZH) >= 100 and len(EN) >= 75 and len(ZH) + len(EN) >= 150


def test_days_are_local_days_not_utc_days() -> None:
    fri = NOWS["FRI"]
    today = W.named_period("今天", fri)
    assert today.first == date(2026, 12, 4) and fri.astimezone(UTC).date() == date(2026, 12, 3)
    assert today.holds(datetime(2026, 12, 3, 16, 0, tzinfo=UTC))  # 00:00 in Beijing
    assert not today.holds(datetime(2026, 12, 3, 15, 59, 59, tzinfo=UTC))
    assert W.named_period("today", fri.replace(tzinfo=None)) == W.Period.of_days(
        date(2026, 12, 4), date(2026, 12, 4), UTC
    )  # a naive now is taken as UTC


def test_period_days_hours_and_overlaps() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    week = W.Period.of_days(date(2026, 3, 23), date(2026, 3, 29), berlin)  # DST starts 29 March
    assert (week.first, week.last) == (date(2026, 3, 23), date(2026, 3, 29))
    assert week.end.utcoffset() == timedelta(hours=2) and week.start.utcoffset() == timedelta(
        hours=1
    )
    assert week.holds(datetime(2026, 3, 29, 21, 59, tzinfo=UTC))  # 23:59 CEST
    assert not week.holds(datetime(2026, 3, 29, 22, 0, tzinfo=UTC))  # Monday 00:00 CEST
    assert week.holds_day(date(2026, 3, 29)) and not week.holds_day(date(2026, 3, 30))
    assert week.overlaps(date(2026, 3, 1), date(2026, 3, 23))
    assert week.overlaps(date(2026, 3, 29), date(2026, 4, 5))
    assert not week.overlaps(date(2026, 3, 30), date(2026, 4, 5))
    assert not week.overlaps(date(2026, 3, 1), date(2026, 3, 22))
    night = W.named_period("昨晚", NOWS["FRI"])
    assert (night.first, night.last) == (date(2026, 12, 3), date(2026, 12, 3))
    assert night.holds(datetime(2026, 12, 3, 23, 59, tzinfo=SHANGHAI))
    assert not night.holds(datetime(2026, 12, 3, 17, 59, tzinfo=SHANGHAI))
    just = W.named_period("刚才", NOWS["SUN"])  # across midnight and a month
    assert (just.first, just.last) == (date(2026, 2, 28), date(2026, 3, 1))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("你现在住在哪", "now"),
        ("我目前在哪工作", "now"),
        ("如今我还养猫吗", "now"),
        ("我还在腾讯上班吗", "now"),
        ("他仍然喜欢咖啡", "now"),
        ("Where do I live now?", "now"),
        ("Do I still play the piano?", "now"),
        ("What am I currently reading?", "now"),
        ("What do I do these days?", "now"),
        ("我以前住在哪", "before"),
        ("我之前的工作是什么", "before"),
        ("我原来叫什么", "before"),
        ("我过去喜欢什么", "before"),
        ("我曾经去过哪里", "before"),
        ("当初我为什么辞职", "before"),
        ("Where did I live before?", "before"),
        ("What did I use to eat?", "before"),
        ("What do I use to clean the floor?", None),
        ("What did I previously own?", "before"),
        ("Where did she work formerly?", "before"),
        ("我以前住哪，现在住哪", None),
        ("你还记得我的狗吗", None),
        ("三天以前我说了什么", None),
        ("What did I do the day before yesterday?", None),
        ("in the past few days", None),
        ("What did I say just now?", None),
        ("我的狗叫什么", None),
        ("What is my dog's name?", None),
        ("I know the answer", None),
    ],
)
def test_tense(text: str, expected: str | None) -> None:
    assert W.tense(text) == expected


def test_has_cjk_and_hostile_text() -> None:
    assert W.has_cjk("年糕") and W.has_cjk("A1037 那个") and not W.has_cjk("What is Mochi?")
    fri = NOWS["FRI"]
    assert W.named_period("", fri) is None
    assert W.named_period("昨天" + "啊" * 100_000, fri) == W.named_period("昨天", fri)
    assert W.named_period("啊" * 100_000 + "昨天", fri) is None  # only the first characters count
