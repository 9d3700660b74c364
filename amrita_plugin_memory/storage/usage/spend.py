"""What one model request cost: the provider's ``usage``, or an estimate from characters.

The usage object is amrita-core's ``UniResponseUsage`` (read by attribute, so
this module imports no framework). Cached prompt tokens are taken from
``cache_hit`` (amrita-core's field, filled by its Anthropic adapter) or, when
an adapter keeps the provider's own fields as extras, from OpenAI's
``prompt_tokens_details.cached_tokens`` or DeepSeek's ``prompt_cache_hit_tokens``.
amrita-core 1.3's OpenAI adapter keeps none of them (its docstring says so), so
behind it the cached share is unknown and recorded as 0.

A request whose provider reported no usage at all (or only zeros) is estimated
from its characters with DeepSeek's published rule of thumb (a CJK character
about 0.6 tokens, any other about 0.3) and counted as estimated.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["Spend", "cached_tokens_of", "estimate_tokens", "spend_of"]

CJK_TOKENS = 0.6
"""Tokens per CJK character (DeepSeek's documentation: 1 个中文字符 ≈ 0.6 个 token)."""
OTHER_TOKENS = 0.3
"""Tokens per other character (1 个英文字符 ≈ 0.3 个 token)."""
_WIDE_FROM = 0x2E80
"""CJK radicals onwards: Han, kana, hangul, full-width forms count as CJK here."""


@dataclass(frozen=True, slots=True)
class Spend:
    """Counters of the ledger, added up (one request, a day, a feature)."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    estimated: int = 0
    """Requests whose tokens were estimated."""
    chars: int = 0
    """Characters a block added to chat turns."""

    @property
    def tokens(self) -> int:
        """What a budget counts: prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Spend) -> Spend:
        return Spend(
            self.requests + other.requests,
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.cached_tokens + other.cached_tokens,
            self.estimated + other.estimated,
            self.chars + other.chars,
        )

    def as_json(self) -> dict[str, int]:
        """The four figures ``usage`` shows per feature."""
        return {
            "requests": self.requests,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached_tokens": self.cached_tokens,
        }


def estimate_tokens(text: str) -> int:
    """Tokens of ``text`` by characters (rounded up; 0 for an empty text)."""
    wide = sum(1 for ch in text if ord(ch) >= _WIDE_FROM)
    return math.ceil(wide * CJK_TOKENS + (len(text) - wide) * OTHER_TOKENS)


def _count(value: Any) -> int:
    """A token count from a provider (a non-negative int), else 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return max(0, int(value))


def _field(holder: Any, name: str) -> Any:
    if isinstance(holder, dict):
        return holder.get(name)
    return getattr(holder, name, None)


def cached_tokens_of(usage: Any) -> int:
    """The prompt tokens the provider served from its cache (0 when it does not say)."""
    if usage is None:
        return 0
    found = _count(getattr(usage, "cache_hit", None))
    extra = getattr(usage, "model_extra", None) or {}
    if not found:
        found = _count(_field(_field(extra, "prompt_tokens_details"), "cached_tokens"))
    if not found:
        found = _count(_field(extra, "prompt_cache_hit_tokens"))
    return min(found, _count(getattr(usage, "prompt_tokens", 0)))


def spend_of(usage: Any, *, sent: Iterable[str], answer: str) -> Spend:
    """One request: the provider's ``usage``, or (none reported) an estimate of the texts
    ``sent`` and the ``answer`` received."""
    prompt = _count(getattr(usage, "prompt_tokens", 0)) if usage is not None else 0
    completion = _count(getattr(usage, "completion_tokens", 0)) if usage is not None else 0
    if prompt == 0 and completion == 0:
        return Spend(
            requests=1,
            prompt_tokens=sum(estimate_tokens(text) for text in sent),
            completion_tokens=estimate_tokens(answer),
            estimated=1,
        )
    return Spend(
        requests=1,
        prompt_tokens=prompt,
        completion_tokens=completion,
        cached_tokens=cached_tokens_of(usage),
    )
