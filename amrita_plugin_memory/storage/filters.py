"""The ``where`` filter that confines a Chroma read to one partition."""

from __future__ import annotations

from typing import Any

from ..core.records import ORIGIN_GROUP_FLAG

__all__ = ["where_partition"]


def where_partition(
    partition: str, *, group_origin_only: bool = False, **filters: str | None
) -> dict[str, Any]:
    clauses: list[dict[str, Any]] = [{"user_id": partition}]
    if group_origin_only:  # memories written in a group chat (see core.records.ORIGIN_GROUP_FLAG)
        clauses.append({ORIGIN_GROUP_FLAG: True})
    clauses += [{k: v} for k, v in filters.items() if v is not None]
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}
