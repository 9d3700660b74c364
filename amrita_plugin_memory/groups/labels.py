"""How members are named in one group's blocks: anonymous labels, or nicknames when switched off."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..prompting.group_window import WindowEntry
from ..prompting.labels import named_label
from ..storage.groups.directory import GroupDirectory

__all__ = ["group_labels"]


async def group_labels(
    directory: GroupDirectory,
    group_id: str,
    entries: Sequence[WindowEntry],
    extra: Iterable[tuple[str, str]],
) -> dict[str, str]:
    """The label of every member in ``entries`` and in ``extra`` (``(user_id, nickname)``).

    Anonymised (the default): ``用户_`` + the id's last digits, fixed per
    member. Otherwise the nickname seen last, followed by the id.
    """
    extra = list(extra)
    if await directory.anonymize(group_id):
        members = [u for u, _ in extra] + [e.user_id for e in entries if not e.is_bot]
        return await directory.labels(group_id, members)
    names: dict[str, str] = {}
    for entry in entries:
        if not entry.is_bot:
            names[entry.user_id] = entry.nickname
    for user_id, nickname in extra:
        names[user_id] = nickname or names.get(user_id, "")
    return {u: named_label(n, u) for u, n in names.items()}
