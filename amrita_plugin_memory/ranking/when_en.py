"""Periods named in English ("yesterday afternoon", "last week", "in October", "3 days ago").

Same design as :mod:`.when_zh`: future expressions ("tomorrow morning", "next
Monday", "in two weeks") are masked first, then the first expression of the
first rule (most specific first) decides. A bare month needs a preposition
("in May", not "May I ask"); "May" and "March" before a day count only
capitalised ("May 5", not "march 5 miles").
"""

from __future__ import annotations

import re
from datetime import date

from .period import FIRST_CHAT, LAST_CHAT, Anchor, Miss, Named, Period, Rule, joined, scan

__all__ = ["ISO_RULE", "en_period"]

_MONTHS = {
    name: i + 1
    for i, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ]
    )
    for name in names
}
_ANY_MONTH = "|".join(sorted(_MONTHS, key=len, reverse=True))
_SAFE_MONTH = "(?-i:May|March|Mar)|" + "|".join(
    n for n in sorted(_MONTHS, key=len, reverse=True) if n not in ("may", "march", "mar")
)
_MONTH = rf"(?P<month>{_ANY_MONTH})\.?"
_DAY = r"(?P<day>\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_WORDS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
}  # fmt: skip
_COUNT = r"\d{1,4}|" + "|".join(_WORDS)
_PART = r"(?:in\s+the\s+|at\s+)?(?P<part>morning|afternoon|evening|night|noon)\b"
_PART_OF = {
    "morning": "morning",
    "noon": "noon",
    "afternoon": "afternoon",
    "evening": "evening",
    "night": "evening",
}
_I = re.IGNORECASE

_FUTURE = re.compile(
    r"\b(?:the\s+day\s+after\s+tomorrow|tomorrow"
    rf"|(?:next|this\s+coming|coming|upcoming)\s+(?:week(?:end)?|month|year|time|{'|'.join(_WEEKDAYS)}|{_ANY_MONTH})"
    r"|later\s+(?:today|tonight|this\s+\w+)"
    rf"|in\s+(?:{_COUNT}|a\s+few|a\s+couple\s+of)\s+(?:days?|weeks?|months?|years?)"
    rf"|(?:{_COUNT})\s+(?:days?|weeks?)\s+from\s+now)\b(?:\s+{_PART})?",
    _I,
)
_PART_AFTER = re.compile(rf"\s+{_PART}", _I)


def _count(word: str) -> int | None:
    word = word.lower()
    return int(word) if word.isdigit() else _WORDS.get(word)


def _full_date(m: re.Match[str], text: str, anchor: Anchor) -> Named | Miss:
    return _on_day(anchor, anchor.calendar_day(int(m["year"]), _month_of(m), int(m["day"])))


def _month_of(m: re.Match[str]) -> int:
    return _MONTHS[m["month"].lower().rstrip(".")]


def _month_year(m: re.Match[str], text: str, anchor: Anchor) -> Named | Miss:
    return anchor.month(int(m["year"]), _month_of(m))


def _chat(m: re.Match[str], text: str, anchor: Anchor) -> Named | Miss:
    return FIRST_CHAT if m["first"] else LAST_CHAT


def _just(m: re.Match[str], text: str, anchor: Anchor) -> Named | Miss:
    return anchor.last_hours(2)


_DAY_WORDS = {
    "the day before yesterday": (2, None),
    "yesterday": (1, None),
    "today": (0, None),
    "earlier today": (0, None),
    "last night": (1, "evening"),
    "tonight": (0, "evening"),
    "this morning": (0, "morning"),
    "this afternoon": (0, "afternoon"),
    "this evening": (0, "evening"),
}


def _on(anchor: Anchor, day_back: int, text: str, end: int) -> Named:
    day = anchor.day(day_back)
    if day is None:
        return None
    if part := _PART_AFTER.match(text, end):
        return anchor.hours(day.first, _PART_OF[part["part"].lower()])
    return day


def _day_word(m: re.Match[str], text: str, anchor: Anchor) -> Named | Miss:
    back, part = _DAY_WORDS[re.sub(r"\s+", " ", m[0].lower())]
    if part is not None:
        return anchor.hours(anchor.today.fromordinal(anchor.today.toordinal() - back), part)
    return _on(anchor, back, text, m.end())


def _unit_back(anchor: Anchor, unit: str, back: int) -> Period | None:
    unit = unit.lower().rstrip("s")
    if unit == "day":
        return anchor.day(back)
    if unit == "week":
        return anchor.week(back)
    if unit == "month":
        return anchor.month_back(back)
    return anchor.year(anchor.today.year - back)


def _ago(m: re.Match[str], text: str, anchor: Anchor) -> Named | Miss:
    n = re.sub(r"\s+", " ", m["n"].lower())
    if n in ("a few", "few", "several", "a couple of", "couple of"):
        near, far = (2, 3) if "couple" in n else (2, 6)
        return joined(_unit_back(anchor, m["unit"], far), _unit_back(anchor, m["unit"], near))
    back = _count(n)
    return Miss.SKIP if back is None else _unit_back(anchor, m["unit"], back)


def _other_day(m: re.Match[str], text: str, anchor: Anchor) -> Named | Miss:
    return anchor.back_span(2, 6)


def _past(m: re.Match[str], text: str, anchor: Anchor) -> Named | Miss:
    unit = m["unit"].lower()
    n = (m["n"] or "").lower()
    if not n and unit.endswith("s"):  # "the last days of summer"
        return Miss.SKIP
    count = 3 if n in ("few", "couple of") else (_count(n) if n else 1)
    if count is None:
        return Miss.SKIP
    return anchor.recent(count * {"day": 1, "week": 7, "month": 30}[unit.rstrip("s")])


def _recent(m: re.Match[str], text: str, anchor: Anchor) -> Named | Miss:
    return anchor.recent(7)


def _weekend(m: re.Match[str], text: str, anchor: Anchor) -> Named | Miss:
    pre = m["pre"].lower()
    return anchor.weekend(1 if pre == "last" else 0 if pre == "this" else None)


def _weekday(m: re.Match[str], text: str, anchor: Anchor) -> Named | Miss:
    pre = (m["pre"] or "").lower()
    weekday = _WEEKDAYS.index(m["wd"].lower())
    day = anchor.weekday(weekday, 0 if pre == "this" else None, before_today=pre == "last")
    found = anchor.days(day, day)
    if found is not None and (part := _PART_AFTER.match(text, m.end())):
        return anchor.hours(day, _PART_OF[part["part"].lower()])
    return found


def _relative(m: re.Match[str], text: str, anchor: Anchor) -> Named | Miss:
    """this / last / the … before last: week, month or year."""
    back = 2 if m["before"] else 1 if m["pre"].lower() == "last" else 0
    unit = (m["unit"] or m["unit2"]).lower()
    return _unit_back(anchor, unit, back)


def _in_month(m: re.Match[str], text: str, anchor: Anchor) -> Named | Miss:
    return anchor.latest_month(_month_of(m), before_this=m["pre"].lower() == "last")


def _in_year(m: re.Match[str], text: str, anchor: Anchor) -> Named | Miss:
    return anchor.year(int(m["year"]))


def _on_day(anchor: Anchor, day: date | None) -> Named:
    return None if day is None else anchor.days(day, day)


def _iso(m: re.Match[str], text: str, anchor: Anchor) -> Named | Miss:
    return _on_day(anchor, anchor.calendar_day(int(m["year"]), int(m["month"]), int(m["day"])))


def _yearless(m: re.Match[str], text: str, anchor: Anchor) -> Named | Miss:
    month = _MONTHS[(m["month"] or m["month2"]).lower()]
    return _on_day(anchor, anchor.calendar_day(None, month, int(m["day"] or m["day2"])))


ISO_RULE: Rule = (
    re.compile(
        r"(?<![\d/.-])(?P<year>(?:19|20)\d\d)[-/.](?P<month>\d{1,2})[-/.](?P<day>\d{1,2})(?!\d)"
    ),
    _iso,
)
"""``2023-05-02``, ``2023/5/2``, ``2023.5.2`` (in either language)."""


_RULES: tuple[Rule, ...] = (
    ISO_RULE,
    (re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH},?\s*{_YEAR}\b", _I), _full_date),
    (re.compile(rf"\b{_MONTH}\s+{_DAY},?\s*{_YEAR}\b", _I), _full_date),
    (re.compile(rf"\b{_MONTH},?\s+(?:of\s+)?{_YEAR}\b", _I), _month_year),
    (
        re.compile(
            rf"\b(?P<month>{_SAFE_MONTH})\.?\s+{_DAY}\b(?!\s*(?::|[ap]\.?m\b|%|percent|miles?|km))"
            rf"|\b(?:the\s+)?(?P<day2>\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?(?P<month2>{_SAFE_MONTH})\b",
            _I,
        ),
        _yearless,
    ),
    (
        re.compile(
            r"\b(?:(?P<first>(?:the\s+)?first\s+time\s+(?:we|i|you)\s+(?:talked|spoke|chatted|met)"
            r"|(?:our|(?:this|the)\s+group'?s)\s+first\s+(?:conversation|chat|talk))"
            r"|(?:the\s+)?last\s+time\s+(?:we|i|you)\s+(?:talked|spoke|chatted|said|told)"
            r"|(?:our|(?:this|the)\s+group'?s)\s+(?:last|previous)\s+(?:conversation|chat|talk)"
            # "what did we talk about last time", "what were you saying the last time"
            r"|(?:we|you|the\s+group|everyone|everybody)(?:\s+\w+){0,2}?\s+(?:talk(?:ed|ing)?|discuss(?:ed|ing)?|chat(?:ted|ting)?"
            r"|spoke|speak(?:ing)?|say(?:ing)?|said|told|tell(?:ing)?|mention(?:ed|ing)?)"
            r"(?:\s+\w+){0,4}?\s+(?:the\s+)?last\s+time)\b",
            _I,
        ),
        _chat,
    ),
    (
        re.compile(
            r"\b(?:just\s+now|a\s+(?:moment|minute|little\s+while)\s+ago|a\s+few\s+minutes\s+ago)\b",
            _I,
        ),
        _just,
    ),
    (
        re.compile(r"\b(?:" + "|".join(w.replace(" ", r"\s+") for w in _DAY_WORDS) + r")\b", _I),
        _day_word,
    ),
    (
        re.compile(
            rf"\b(?P<n>{_COUNT}|a\s+few|few|several|a\s+couple\s+of|couple\s+of)\s+"
            r"(?P<unit>days?|weeks?|months?|years?)\s+ago\b",
            _I,
        ),
        _ago,
    ),
    (re.compile(r"\bthe\s+other\s+day\b", _I), _other_day),
    (
        re.compile(
            rf"\b(?:the|these)\s+(?:past|last)\s+(?:(?P<n>{_COUNT}|few|couple\s+of)\s+)?"
            r"(?P<unit>days?|weeks?|months?)\b",
            _I,
        ),
        _past,
    ),
    (re.compile(r"\b(?:recently|lately|these\s+days|in\s+recent\s+days|of\s+late)\b", _I), _recent),
    (
        re.compile(r"\b(?P<pre>last|this|the\s+past|over\s+the|on\s+the|at\s+the)\s+weekend\b", _I),
        _weekend,
    ),
    (
        re.compile(
            rf"(?<!every\s)(?<!next\s)\b(?:(?P<pre>last|this|on|past)\s+)?(?P<wd>{'|'.join(_WEEKDAYS)})\b",
            _I,
        ),
        _weekday,
    ),
    (
        re.compile(
            r"\b(?:(?P<pre>this|last)\s+(?P<unit>week|month|year)"
            r"|the\s+(?P<unit2>week|month|year)\s+(?P<before>before\s+last))\b",
            _I,
        ),
        _relative,
    ),
    (
        re.compile(
            rf"\b(?P<pre>in|during|back\s+in|last)\s+(?:(?:early|late|mid)[\s-]+)?{_MONTH}(?!\w)(?!\s*\d)",
            _I,
        ),
        _in_month,
    ),
    (re.compile(rf"\b(?:in|during|back\s+in)\s+{_YEAR}\b(?!\s*[-/])", _I), _in_year),
)


def en_period(text: str, anchor: Anchor) -> Named | Miss:
    """The period an English ``text`` names (:attr:`Miss.SKIP`: it names no time)."""
    return scan(_RULES, _FUTURE.sub("|", text), anchor)
