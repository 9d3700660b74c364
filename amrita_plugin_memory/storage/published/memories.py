"""A memory's Chroma metadata as the published plugin wrote it, in this plugin's form.

The published plugin stores ``user_id`` (the partition, the same key format), ``scope``,
``importance``, ``tags`` as the plain string the model gave (``"宠物,猫"``) and
``created_at`` (ISO with microseconds); it records neither ``updated_at`` nor where a
memory was said (``origin`` / ``from_group``), nor a writer. Every row this plugin writes
has ``updated_at``, so its absence marks a row still in the published form
(:func:`needs_adoption`). :func:`adopted_metadata` gives the row its place here, deciding
privacy conservatively where the origin was never recorded: a personal memory counts as
said in private (shown in the user's private chat only), a group memory as said in its
group. The row's text, vector, id, partition, scope and importance are unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from ...core.records import (
    ORIGIN_GROUP_FLAG,
    ORIGIN_PRIVATE,
    decode_tags,
    encode_tags,
    origin_of_group,
)
from ..keys import parse_key

__all__ = ["META_FORMAT", "META_FORMAT_CURRENT", "adopted_metadata", "needs_adoption"]

META_FORMAT = "memory_metadata_format"
"""Collection metadata: every memory of the collection is in this plugin's form when it
equals :data:`META_FORMAT_CURRENT` (the start-up check then reads nothing else)."""
META_FORMAT_CURRENT = "amrita_plugin_memory/1"


def needs_adoption(meta: Mapping[str, Any] | None) -> bool:
    """Whether a row is still in the published plugin's form (no ``updated_at``)."""
    return meta is not None and "updated_at" not in meta


def _stamp(value: Any) -> str:
    """An ISO time in this plugin's form (UTC, seconds); unreadable text is kept as is."""
    text = value if isinstance(value, str) else ""
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return text
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC).isoformat(timespec="seconds")


def _origin(meta: Mapping[str, Any]) -> str:
    if meta.get("scope") != "group":
        return ORIGIN_PRIVATE  # never recorded: the private chat only
    try:
        parsed = parse_key(str(meta.get("user_id", "")))
    except Exception:  # not a key of the installed Amrita
        parsed = None
    return origin_of_group(str(parsed[1])) if parsed and parsed[0] == "group" else ORIGIN_PRIVATE


def adopted_metadata(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The metadata of a published row in this plugin's form (unknown keys kept)."""
    out = dict(meta)
    created = _stamp(meta.get("created_at"))
    origin = _origin(meta)
    out.update(
        {
            "tags": encode_tags(decode_tags(meta.get("tags"))),
            "created_at": created,
            "updated_at": created,
            "origin": origin,
            ORIGIN_GROUP_FLAG: origin != ORIGIN_PRIVATE,
        }
    )
    if out.get("importance") not in ("low", "medium", "high"):
        out["importance"] = "medium"
    if out.get("scope") not in ("user", "group"):
        out["scope"] = "user"
    return out
