"""One user's data in the console: the export (a download), what a forget removes, the forget.

``GET /api/memory/users/{user_id}/export`` (the document of
:meth:`~..upkeep.users.user_data.UserData.export`), ``GET …/forget`` (the counts a
forget would remove and the lines of what it keeps, for the page's
confirmation) and ``DELETE /api/memory/users/{user_id}`` (the forget).
``ambot memory export|forget`` asks a running bot the same. Every call leaves
an audit line with the user id (and a forget's counts), never a text. The
console's caches of partitions and status are dropped at the end of every
forget, wherever it came from (:class:`~.service.ConsoleService` registers
that on ``UserData.after_forget``).
"""

from __future__ import annotations

from typing import Any

from ..upkeep.users.user_data import UserData
from . import params
from .catalog import PartitionCatalog
from .errors import audit, guarded, not_found

__all__ = ["UserAdmin"]


class UserAdmin:
    """The per-user operations of the console (``None``: not available in this process)."""

    def __init__(self, data: UserData | None, catalog: PartitionCatalog) -> None:
        self.data = data
        self.catalog = catalog

    def _ready(self, raw: Any) -> tuple[UserData, str]:
        if self.data is None:
            not_found("用户数据的导出与遗忘在此进程中不可用")
        return self.data, params.user_id(raw)

    async def export(self, actor: str, raw: Any) -> dict[str, Any]:
        data, user_id = self._ready(raw)
        document = await guarded("console_user_export", lambda: data.export(user_id))
        audit(actor, "导出用户数据", user=user_id)
        return document

    async def preview(self, raw: Any) -> dict[str, Any]:
        data, user_id = self._ready(raw)
        counts = await guarded("console_user_preview", lambda: data.preview(user_id))
        return counts.report(user_id)

    async def forget(self, actor: str, raw: Any) -> dict[str, Any]:
        data, user_id = self._ready(raw)
        try:  # ForgetBlocked: 409 (core/errors.WORDS)
            counts = await guarded("console_user_forget", lambda: data.forget(user_id))
        finally:
            self.catalog.invalidate()  # partitions may be gone, even after a failure
        audit(actor, "遗忘用户", user=user_id, **counts.to_json())
        return counts.report(user_id)
