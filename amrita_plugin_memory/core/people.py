"""Who a memory is about: the user, or someone the user knows.

"用户妈妈的手机尾号是1736" is a fact about the mother, however close its words
are to the user's own phone number. Ranking uses this twice: a fact about
someone else is never the update of the user's own (:mod:`..storage.succession`),
and its life topics are not the user's (:class:`~.ranking.KeywordIndex`).
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["people_named", "same_people"]

_PEOPLE = re.compile(
    r"妈|爸|母亲|父亲|爷爷|奶奶|外公|外婆|姥姥|姥爷|哥|姐|弟|妹|老婆|老公|妻子|丈夫|女朋友|男朋友"
    r"|女友|男友|儿子|女儿|孩子|朋友|同事|同学|室友|舍友|领导|上司|老板|老师|邻居|叔叔|阿姨|舅舅"
    r"|\b(?:mother|mom|mum|father|dad|parents?|grand(?:ma|pa|mother|father)|brother|sister"
    r"|wife|husband|girlfriend|boyfriend|son|daughter|kids?|child(?:ren)?|friends?"
    r"|colleagues?|co-?workers?|classmates?|room-?mates?|flatmates?|boss|teacher"
    r"|neighbou?rs?|uncle|aunt|cousin)\b"
)
"""Words naming another person: "用户妈妈的手机尾号" is about the mother, not the user."""


def people_named(text: str) -> set[str]:
    """The words of ``text`` that name another person (:data:`_PEOPLE`)."""
    return set(_PEOPLE.findall(unicodedata.normalize("NFKC", text).lower()))


def same_people(a: str, b: str) -> bool:
    """Whether both texts name the same other people (or none): a fact about the
    user's mother is never an update of a fact about the user, however alike the words."""
    return people_named(a) == people_named(b)

