"""Function schemas: the building blocks of every tool's schema (chat tools, loop tools)."""

from __future__ import annotations

from typing import Any

from amrita_core import FunctionDefinitionSchema, FunctionParametersSchema, FunctionPropertySchema

from ..core.records import IMPORTANCE_LEVELS, SCOPES
from .args import LIMITS

__all__ = [
    "EVENT_DATE_MEANING",
    "REPLACES_MEANING",
    "SCOPE_MEANING",
    "date_prop",
    "define",
    "importance_prop",
    "limit_prop",
    "memory_id_prop",
    "offset_prop",
    "prop",
    "scope_prop",
    "tags_prop",
    "top_k_prop",
]


def prop(type_: str, description: str | None = None, **kw: Any) -> FunctionPropertySchema:
    """One parameter of a tool schema.

    Without ``description`` the key is left out of the request: Amrita hands the
    schema objects to the OpenAI SDK, which sends only the fields that were set
    (``exclude_unset``). A name such as ``query`` or an ``enum`` says enough, and
    every character of a chat tool's schema is in every request of every turn.
    """
    if description is not None:
        kw["description"] = description
    return FunctionPropertySchema(type=type_, **kw)  # type: ignore[arg-type]


def define(
    name: str, description: str, props: dict[str, FunctionPropertySchema], required: list[str]
) -> FunctionDefinitionSchema:
    """A tool schema (surface tools and the L3 loop's tools alike).

    The parameters are put together without validating ``props`` a second time
    (each was validated when built): Amrita's validator would add
    ``"uniqueItems": false``, JSON Schema's default, to every array again.
    """
    parameters = FunctionParametersSchema.model_construct(
        type="object", properties=props, required=required
    )
    return FunctionDefinitionSchema(name=name, description=description, parameters=parameters)


def importance_prop() -> FunctionPropertySchema:
    return prop("string", enum=list(IMPORTANCE_LEVELS))


def tags_prop() -> FunctionPropertySchema:
    """Up to ``LIMITS.tags`` tags (a tag longer than ``LIMITS.tag_chars`` is refused with
    a clear error by ``args.parse_tags``)."""
    # ``model_construct``: Amrita's validator would add ``"uniqueItems": false``
    # (JSON Schema's default anyway) to every request; the schema is valid as built.
    return FunctionPropertySchema.model_construct(
        type="array", items=prop("string"), maxItems=LIMITS.tags
    )


# The bounds a model could plausibly overstep are keywords it reads (``maximum``); the
# others (an id's or a query's length, a negative offset) are refused with a clear error
# by ``args`` and cost no characters in every request.


EVENT_DATE_MEANING = "事发日期YYYY-MM-DD"
"""What ``event_date`` means, told once per request (on ``write_memory``)."""


REPLACES_MEANING = "事实变了:旧记忆id(保留)"
"""What ``replaces`` means (``write_memory``): the older version of a fact that changed."""


def date_prop(description: str | None = None) -> FunctionPropertySchema:
    """A local date (``YYYY-MM-DD``; a month or a year also accepted by ``args.parse_event_date``)."""
    return prop("string", description)


def memory_id_prop() -> FunctionPropertySchema:
    return prop("string")


def top_k_prop() -> FunctionPropertySchema:
    return prop("integer", maximum=LIMITS.top_k_max)


def limit_prop() -> FunctionPropertySchema:
    return prop("integer", maximum=LIMITS.list_max)


def offset_prop() -> FunctionPropertySchema:
    return prop("integer")


SCOPE_MEANING = "user=说话人的个人记忆(私聊群聊通用),group=本群共享(仅群聊)"
"""What the two scopes mean, told once per request (on ``write_memory``'s ``scope``)."""


def scope_prop(*, explained: bool = False) -> FunctionPropertySchema:
    """The ``scope`` argument of the memory tools (``user`` or ``group``); ``explained``
    adds :data:`SCOPE_MEANING` (one tool carries it: the others share the same enum)."""
    return prop("string", SCOPE_MEANING if explained else None, enum=list(SCOPES))
