"""Periods named in Chinese ("昨天晚上", "上周三", "十月份", "三天前", "最近").

Rules in order of precedence (:func:`~.period.scan`): the first expression the
first rule recognises decides, so "上周三下午" is a Wednesday afternoon, not
"上周". Future expressions ("明天早上", "下周三", "明年三月") are masked first,
so their parts ("早上", "周三", "三月") are not read as past ones. The spans
each word stands for are listed in docs/retrieval.md.
"""

from __future__ import annotations

import re
from datetime import date

from .period import FIRST_CHAT, LAST_CHAT, Anchor, Miss, Named, Period, Rule, joined, scan
from .when_en import ISO_RULE

__all__ = ["zh_number", "zh_period"]

_DIGITS = {
    "零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3,
    "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9,
}  # fmt: skip


def zh_number(text: str) -> int | None:
    """``"12"``, ``"十二"``, ``"二十五"``, ``"两"``, ``"二〇二三"`` as a number (``None``: not one)."""
    if text.isascii() and text.isdigit():
        return int(text)
    if "十" in text:
        tens, _, ones = text.partition("十")
        high = _DIGITS.get(tens, -1) if tens else 1
        low = _DIGITS.get(ones, -1) if ones else 0
        return high * 10 + low if high >= 1 and low >= 0 else None
    value = 0
    for ch in text:
        digit = _DIGITS.get(ch)
        if digit is None:
            return None
        value = value * 10 + digit
    return value if text else None


_NUM = r"[0-9零〇一二两三四五六七八九十]{1,4}"
_MON = r"(?:1[0-2]|0?[1-9]|十[一二]?|[一二三四五六七八九])"
_DAYN = r"(?:[0-3]?[0-9]|三十一?|二?十[一二三四五六七八九]?|[一二三四五六七八九])"
_PART = "凌晨|半夜|深夜|早上|早晨|清晨|一早|上午|中午|下午|傍晚|晚上|夜里|夜间"
_PART_OF = {
    "凌晨": "dawn", "半夜": "dawn", "深夜": "evening", "早上": "early", "早晨": "early",
    "清晨": "early", "一早": "early", "上午": "morning", "中午": "noon", "下午": "afternoon",
    "傍晚": "dusk", "晚上": "evening", "夜里": "evening", "夜间": "evening",
}  # fmt: skip
_PRE = r"(?P<pre>上上|上|这|本)[个一]?"
_BACK = {"上上": 2, "上": 1, "这": 0, "本": 0}
_WEEK = r"(?:周|星期|礼拜)"
_WEEKDAYS = {"一": 0, "二": 1, "三": 2, "四": 3, "五": 4, "六": 5, "日": 6, "天": 6}

_FUTURE = re.compile(
    rf"(?:大?后天|明天|明日|明早|明晚|后年|明年(?:{_MON}月份?(?:{_DAYN}[日号])?)?"
    rf"|(?<!一)下下?[个一]?{_WEEK}[末一二三四五六日天1-7]?|(?<!一)下下?[个一]?月(?:{_DAYN}[日号])?"
    rf"|{_NUM}(?:天|周|个?星期|个?礼拜|个月|年)[以之]?后|下次|下回)(?:的?(?:{_PART}))?"
)
_PART_AFTER = re.compile(rf"\s*(?:那天)?的?\s*(?P<part>{_PART})")
_HABIT = re.compile(r"每|天天|平时|平常|一般|通常|经常|总是|习惯")
_TRADITIONAL = str.maketrans(
    "週這個禮號後幾兩來時間剛陣說聊話對談講訴離", "周这个礼号后几两来时间刚阵说聊话对谈讲诉离"
)


def _on(day: date | None, text: str, end: int, anchor: Anchor) -> Named:
    """``day``, or the part of it named right after (``昨天晚上``, ``周三下午``)."""
    if day is None:
        return None
    if part := _PART_AFTER.match(text, end):
        return anchor.hours(day, _PART_OF[part["part"]])
    return anchor.days(day, day)


def _date(m: re.Match[str], text: str, anchor: Anchor) -> Named | Miss:
    month = zh_number(m["month"]) or 0
    year: int | None = None
    if m["year"]:
        year = zh_number(m["year"])
    elif m["rel"]:
        year = anchor.today.year - ("今年", "去年", "前年").index(m["rel"])
    if m["day"] is None:
        if text.startswith("天", m.end()):  # 五月天: a band, not May
            return Miss.SKIP
        return anchor.latest_month(month) if year is None else anchor.month(year, month)
    found = anchor.calendar_day(year, month, zh_number(m["day"]) or 0)
    return _on(found, text, m.end(), anchor)


def _year(m: re.Match[str], text: str, anchor: Anchor) -> Named | Miss:
    return anchor.year(zh_number(m["year"]) or 0)


def _chat(m: re.Match[str], text: str, anchor: Anchor) -> Named | Miss:
    return FIRST_CHAT if m["first"] else LAST_CHAT


def _just(m: re.Match[str], text: str, anchor: Anchor) -> Named | Miss:
    return anchor.last_hours(2)


_DAY_WORDS = {
    "大前天": (3, None), "前天": (2, None), "昨天": (1, None), "昨日": (1, None),
    "今天": (0, None), "今日": (0, None), "昨晚": (1, "evening"), "昨夜": (1, "evening"),
    "前晚": (2, "evening"), "今早": (0, "early"), "今晨": (0, "early"),
    "今晚": (0, "evening"), "今夜": (0, "evening"),
}  # fmt: skip


def _day_word(m: re.Match[str], text: str, anchor: Anchor) -> Named | Miss:
    back, part = _DAY_WORDS[m[0]]
    day = anchor.today.toordinal() - back
    if part is not None:
        return anchor.hours(date.fromordinal(day), part)
    return _on(date.fromordinal(day), text, m.end(), anchor)


def _unit_back(anchor: Anchor, unit: str, back: int) -> Period | None:
    if unit in ("天", "日"):
        return anchor.day(back)
    if unit == "个月":
        return anchor.month_back(back)
    if unit == "年":
        return anchor.year(anchor.today.year - back)
    return anchor.week(back)


def _ago(m: re.Match[str], text: str, anchor: Anchor) -> Named | Miss:
    unit = m["unit"].lstrip("个")
    unit = "个月" if unit == "月" else unit
    if m["n"] == "几":  # a few: 2 … 6 back
        return joined(_unit_back(anchor, unit, 6), _unit_back(anchor, unit, 2))
    if m["n"] == "半":
        return anchor.month_back(6) if unit == "年" else Miss.SKIP
    back = zh_number(m["n"])
    return Miss.SKIP if back is None else _unit_back(anchor, unit, back)


def _weekend(m: re.Match[str], text: str, anchor: Anchor) -> Named | Miss:
    return anchor.weekend(_BACK[m["pre"]])


def _weekday(m: re.Match[str], text: str, anchor: Anchor) -> Named | Miss:
    wd = m["wd"]
    weekday = int(wd) - 1 if wd.isdigit() else _WEEKDAYS[wd]
    back = None if m["pre"] is None else _BACK[m["pre"]]
    return _on(anchor.weekday(weekday, back), text, m.end(), anchor)


def _week(m: re.Match[str], text: str, anchor: Anchor) -> Named | Miss:
    return anchor.week(_BACK[m["pre"]])


def _month(m: re.Match[str], text: str, anchor: Anchor) -> Named | Miss:
    back = _BACK[m["pre"]]
    if m["day"] is None:
        return anchor.month_back(back)
    month = anchor.month_back(back)
    if month is None:
        return None
    found = anchor.calendar_day(month.first.year, month.first.month, zh_number(m["day"]) or 0)
    return _on(found, text, m.end(), anchor)


def _rel_year(m: re.Match[str], text: str, anchor: Anchor) -> Named | Miss:
    back = ("今年", "去年", "前年", "大前年").index(m[0].replace("本年", "今年"))
    return anchor.year(anchor.today.year - back)


_SPANS = {
    "前几天": (2, 6), "前两天": (2, 6), "前些天": (2, 6),
    "前些日子": (3, 30), "前段时间": (3, 30), "前阵子": (3, 30), "前一阵子": (3, 30),
    "前一阵": (3, 30), "这几天": (0, 2), "这两天": (0, 2), "近几天": (0, 2),
    "这些天": (0, 2), "最近几天": (0, 2), "最近": (0, 6), "近来": (0, 6), "近期": (0, 6),
    "这段时间": (0, 6), "这阵子": (0, 6), "这一阵子": (0, 6),
}  # fmt: skip
_NEAREST = re.compile(r"[^，。？！,.?!]{0,12}(?:在哪|哪里|哪儿|哪个|哪家|多远|怎么走|附近)")


def _span(m: re.Match[str], text: str, anchor: Anchor) -> Named | Miss:
    word = m[0]
    if word == "最近":
        # 最近一次 (the latest occurrence) and 最近的地铁站在哪 / 离家最近 (nearest) name no span.
        if text.startswith(("一次", "那次", "一回"), m.end()) or "离" in text[: m.start()]:
            return Miss.SKIP
        if text.startswith("的", m.end()) and _NEAREST.match(text, m.end()):
            return Miss.SKIP
    nearest, farthest = _SPANS[word]
    return anchor.back_span(nearest, farthest)


def _part(m: re.Match[str], text: str, anchor: Anchor) -> Named | Miss:
    if _HABIT.search(text):  # 每天早上 / 平时晚上: a habit, not a time
        return Miss.SKIP
    return anchor.part_alone(_PART_OF[m["part"]])


_RULES: tuple[Rule, ...] = (
    ISO_RULE,
    (
        re.compile(
            r"(?<![0-9零〇一二两三四五六七八九十上这本个第每])"
            r"(?:(?P<year>(?:19|20)[0-9]{2}|[零〇一二三四五六七八九]{4})\s*年\s*|(?P<rel>今年|去年|前年)\s*)?"
            rf"(?P<month>{_MON})\s*月份?(?:\s*(?P<day>{_DAYN})\s*[日号])?"
        ),
        _date,
    ),
    (
        re.compile(
            r"(?<![0-9])(?P<year>(?:19|20)[0-9]{2}|[零〇一二三四五六七八九]{4})\s*年"
            r"(?!代|级|前|后|以前|之前|以后|之后)"
        ),
        _year,
    ),
    (
        re.compile(
            r"(?P<first>(?:(?:群里|本群|这个群|大家)(?:的|在群里)?)?第一次(?:和你|跟你|与你|同你)?(?:对话|聊天|聊|交谈|说话|谈话))"
            r"|(?:上一?[次回]|最后一次|最近一次)(?:我们|咱们|大家|你们|你|我)?"
            # a group's: 上次群里聊了什么, 上回大家在群里聊的啥
            r"(?:在?(?:群里|群聊里?|这个群里?|本群里?)(?:大家|我们|你们)?)?"
            r"(?:和你|跟你|与你|和我|跟我)?的?(?:聊|说|谈|对话|交谈|讲|提|告诉)"
        ),
        _chat,
    ),
    (re.compile(r"刚才|刚刚(?!好)|方才"), _just),
    (re.compile("|".join(_DAY_WORDS)), _day_word),
    (
        re.compile(
            rf"(?P<n>{_NUM}|几|半)\s*(?P<unit>天|日|周|个?星期|个?礼拜|个?月|年)(?:以|之)?前"
        ),
        _ago,
    ),
    (re.compile(rf"(?<![下每])(?<!日){_PRE}{_WEEK}末"), _weekend),
    (
        re.compile(
            rf"(?<![每到至~\-])(?:{_PRE})?{_WEEK}(?P<wd>[一二三四五六日天1-7])"
            rf"(?![次年气天]|\s*[到至~\-])"
        ),
        _weekday,
    ),
    (re.compile(rf"(?<![下每一日]){_PRE}{_WEEK}(?![末一二三四五六日1-7]|天(?!气))"), _week),
    (re.compile(rf"(?<![下日]){_PRE}月份?(?:\s*(?P<day>{_DAYN})\s*[日号])?"), _month),
    (re.compile(r"大前年|前年|去年|今年|本年"), _rel_year),
    (re.compile("|".join(sorted(_SPANS, key=len, reverse=True))), _span),
    (re.compile(rf"(?P<part>{_PART})(?![好茶饭点])"), _part),
)


def zh_period(text: str, anchor: Anchor) -> Named | Miss:
    """The period a Chinese ``text`` names (:attr:`Miss.SKIP`: it names no time)."""
    text = _FUTURE.sub("|", text.translate(_TRADITIONAL))
    return scan(_RULES, text, anchor)
