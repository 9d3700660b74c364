"""Does a message ask about past conversations, and which ones (issue #48)?

Pure functions (no storage, no framework). :func:`episode_question` reads a
message the way the per-turn episode recall needs it:

- ``last``: :func:`~.when.named_period` says :data:`~.when.LAST_CHAT`
  ("上次我们聊了什么", "上次说的面试怎么样了", "what did we talk about last time");
  a bare "上次考试" or "last time I went to the gym" is no conversation question;
- ``first``: it says :data:`~.when.FIRST_CHAT` ("我们第一次聊天说了啥");
- ``period``: it names a past period *and* a conversation word ("昨天群里聊了什么",
  "what did we discuss yesterday"); "我昨天吃了火锅" names a period but no talk;
- ``topic``: no period, but a cue that points back at an earlier conversation
  ("之前聊的那个电影", "你还记得我们聊过猫吗", "you mentioned a book").

Future talk ("明天聊", "下次再说") and invitations ("我们聊聊天吧") ask nothing.
:func:`content_terms` gives what the message is about once the cue, time and
question words are masked (the episode's keyword match; the same masking
serves the extractive summaries, :mod:`.episode_extract`).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from .keywords import keyword_terms, tokenize
from .when import FIRST_CHAT, LAST_CHAT, MAX_CHARS, Period, named_period

__all__ = [
    "EpisodeAsk",
    "EpisodeKind",
    "content_runs",
    "content_terms",
    "episode_question",
    "is_stop_term",
]

EpisodeKind = Literal["last", "first", "period", "topic"]


@dataclass(frozen=True, slots=True)
class EpisodeAsk:
    """What a message asks of the past conversations."""

    kind: EpisodeKind
    period: Period | None = None
    """The local span named (``kind == "period"`` only)."""
    topic_terms: tuple[str, ...] = ()
    """The message's content terms (:func:`content_terms`): what the conversation was about."""


_TALK = re.compile(
    r"聊|说|谈|讲|讨论|对话|提到|提起|群里|群聊"
    r"|\b(?:talk\w*|discuss\w*|chat\w*|conversations?|say\w*|said|mention\w*|tell\w*|told"
    r"|spoke|speak\w*)\b",
    re.IGNORECASE,
)
"""A conversation word: with a named period, the message asks about what was said then."""

_RECALL = re.compile(
    # 之前聊的X / 以前我们说过 / 那天你提到的 / 上回讨论的
    r"(?:之前|以前|先前|早先|那次|那天|那会儿?|上次|上回)(?:我们|咱们|你|我)?"
    r"(?:和你|跟你|与你|和我|跟我)?的?(?:聊|说|谈|讲|讨论|提)"
    # 你还记得我们… / 记得我跟你说过
    r"|记得(?:我们|咱们)|记得(?:我|你)(?:跟你|和你|跟我|和我)?(?:说|聊|谈|讲|提)"
    # 我们聊过 / 咱们讨论过 / 我们之前说到过
    r"|(?:我们|咱们)(?:之前|以前|那天|上次)?(?:聊|谈|讨论|说|讲)(?:过|到过)"
    # 你提到过 / 我跟你说起过
    r"|(?:你|我)(?:之前|以前)?(?:跟你|和你|跟我|和我)?(?:提到|提起|说起|聊起|说过|讲过)"
    r"|\bremember\s+(?:when|what|how|that|the\s+time)\s+(?:we|you|i)\b"
    r"|\bremember\s+(?:our|that)\s+(?:conversation|chat|talk)\b"
    r"|\byou\s+(?:mentioned|said|told\s+me)\b"
    r"|\bi\s+(?:told\s+you|mentioned)\b"
    r"|\bwe\s+(?:talked|spoke|chatted|discussed|were\s+(?:talking|discussing|chatting))\b",
    re.IGNORECASE,
)
"""A cue pointing back at an earlier conversation, with no period named."""

# Words masked before the content terms are read: cue and talk words, time words,
# question words, pronouns and particles (longest first, so 怎么样 goes before 怎么).
_ZH_MASK = re.compile(
    r"第一次|最后一次|上上?[一个]?(?:次|回|周[一二三四五六日天末]?|星期[一二三四五六日天]?"
    r"|礼拜[一二三四五六日天]?|个?月)|这[一个]?(?:周|星期|礼拜|个?月)"
    r"|(?:周|星期|礼拜)[一二三四五六日天末]"
    r"|[0-9零〇一二两三四五六七八九十几半]+(?:个?月份?|[日号天周年]|个?星期|个?礼拜)(?:以前|之前|前)?"
    r"|大前天|前天|昨天|昨日|今天|今日|昨晚|昨夜|前晚|今早|今晨|今晚|今夜|刚才|刚刚|方才"
    r"|最近|近来|近期|前几天|前两天|前些天|前些日子|前段时间|前一?阵子?|这几天|这两天|这些天|这段时间"
    r"|凌晨|半夜|深夜|早上|早晨|清晨|上午|中午|下午|傍晚|晚上|夜里|时候"
    r"|之前|以前|先前|早先|那次|那天|那会儿?|去年|今年|前年"
    r"|还记得|记得|记不记得|你|我|他|她|它|们|咱|大家|群里|群聊|本群|这个群|群"
    r"|聊天|聊|说话|说|谈话|谈|讲|讨论|对话|交谈|提到|提起|提过|告诉|跟|和|与|同"
    r"|怎么样|怎么|如何|什么|啥|哪里|哪儿|哪个|哪些|哪|多少|几|谁|为什么|是不是|有没有"
    r"|[这那][个家本部只位件种次些样]?|一下|一些|一点|有点|还|又|都|也|就|才|再|很|太"
    r"|的|了|吗|呢|吧|啊|呀|嘛|么|过|着|是|在|到|有|没|要|把|被|给|让|对|个|一"
)

_EN_STOP = frozenset(
    "talk talked talking talks discuss discussed discussing discussion chat chatted chatting "
    "conversation conversations say said saying says mention mentioned mentioning tell told "
    "telling spoke speak speaking remember recall last first time times previous earlier before "
    "ago yesterday today tomorrow tonight next later soon night morning afternoon evening week weeks month months year "
    "years day days weekend recently lately just now then again ever about us our ours "
    "this that these those there here with from into any some something anything "
    "was were been being have has had will would can could should shall may might must "
    "not no yes so but if as by up out over also too very really "
    "monday tuesday wednesday thursday friday saturday sunday "
    "january february march april june july august september october november december "
    "let lets please know think thing things".split()
)
"""English words that carry the question, the time or the talk, not its subject."""

_ZH_STOP_CHARS = frozenset("的了吗呢吧啊呀嘛么过着是在有没你我他她它们咱这那哪啥谁个")


def is_stop_term(term: str) -> bool:
    """Whether a keyword term names no subject: an English stop word, a pure number,
    or a CJK term made of particles and pronouns."""
    if term.isascii():
        return term.isdigit() or term in _EN_STOP or len(term) < 2
    return all(ch in _ZH_STOP_CHARS for ch in term)


def content_runs(text: str) -> list[str]:
    """``text`` split at masked words (cue, time, question words, pronouns, particles)
    and punctuation: the pieces left say what it is about ("上次说的面试怎么样了" →
    ``["面试"]``)."""
    norm = unicodedata.normalize("NFKC", text[:MAX_CHARS]).lower()
    masked = _ZH_MASK.sub(" ", norm)
    return [run for run in re.split(r"[\W_]+", masked) if run]


def content_terms(text: str) -> tuple[str, ...]:
    """The keyword terms (:func:`~.keywords.keyword_terms`, stems for English) of what
    ``text`` is about, without stop terms and repeats, in order of appearance."""
    found: dict[str, None] = {}
    for run in content_runs(text):
        for token in tokenize(run):
            if is_stop_term(token):
                continue
            for term in keyword_terms(token):
                if not is_stop_term(term):
                    found.setdefault(term, None)
    return tuple(found)


def episode_question(text: str, now: datetime) -> EpisodeAsk | None:
    """What ``text`` asks of the past conversations (see the module docstring), or
    ``None`` when it asks nothing of them. ``now``: the owner's aware local moment
    the message was sent (as for :func:`~.when.named_period`)."""
    if not isinstance(text, str) or not text.strip():
        return None
    named = named_period(text, now)
    if named == LAST_CHAT:
        return EpisodeAsk("last", None, content_terms(text))
    if named == FIRST_CHAT:
        return EpisodeAsk("first", None, content_terms(text))
    head = text[:MAX_CHARS]
    if isinstance(named, Period):
        if _TALK.search(head):
            return EpisodeAsk("period", named, content_terms(text))
        return None
    if named is None and _RECALL.search(head):
        terms = content_terms(text)
        return EpisodeAsk("topic", None, terms) if terms else None
    return None
