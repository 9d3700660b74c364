"""``/memory user export [页码]`` and ``/memory user forget [confirm]``: a user's own data.

Private chats only: everything here is about the caller alone, so a group
gets only the hint to ask in private. The work is
:class:`~..upkeep.users.user_data.UserData`; this module adds the chat side:

* **export**: the JSON document as a file through OneBot's
  ``upload_private_file`` (an extension of NapCat and Lagrange.OneBot). The
  file is written to ``<data_dir>/exports/`` (mode 0600) and deleted right
  after the call, so the OneBot implementation must run on the same machine
  as the bot, as the same system user. When the call fails (another
  implementation, another machine), the document is sent as text messages,
  :data:`PAGES_PER_REPLY` pages of :data:`PAGE_CHARS` characters at a time;
  ``/memory user export <页码>`` continues from a page.
* **forget**: the first command shows the counts per kind and asks for
  ``/memory user forget confirm`` within :data:`CONFIRM_SECONDS`; only then
  is anything removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nonebot import logger

from ..storage.scope import Scope
from ..upkeep.users.forget_counts import ForgetCounts
from ..upkeep.users.user_data import UserData
from .args import guard_tool_call

__all__ = [
    "CONFIRM_SECONDS",
    "PAGES_PER_REPLY",
    "PAGE_CHARS",
    "ExportDocument",
    "UserCommands",
]

CONFIRM_SECONDS = 300
"""How long a forget waits for its confirmation."""
PAGE_CHARS = 3000
"""Characters of the JSON document per text message (when no file can be sent)."""
PAGES_PER_REPLY = 10
"""Text messages sent for one command; the rest on request (``/memory user export <页码>``)."""
STALE_EXPORT_SECONDS = 3600
"""An export file older than this was left by a crash: removed at the next export."""

_CONFIRM = {"confirm", "确认"}
Upload = Callable[[Path, str], Awaitable[Any]]
"""``upload_private_file`` of the caller's chat: ``(file path, file name)``."""
Send = Callable[[str], Awaitable[Any]]
"""One message to the caller's private chat."""


@dataclass(frozen=True, slots=True)
class ExportDocument:
    """A user's export as sent: the file name and the JSON text."""

    name: str
    text: str

    @classmethod
    def of(cls, user_id: str, document: dict[str, Any]) -> ExportDocument:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        text = json.dumps(document, ensure_ascii=False, indent=1) + "\n"
        return cls(f"memory_export_{user_id}_{stamp}.json", text)

    def pages(self) -> list[str]:
        """The text in pages of at most :data:`PAGE_CHARS`, cut between lines where it
        can be: a chat client trimming a message's edges then only drops whitespace
        between JSON values (a line longer than a page is cut inside, unavoidably)."""
        pages: list[str] = []
        current = ""
        for line in self.text.splitlines(keepends=True):
            while len(line) > PAGE_CHARS:
                if current:
                    pages.append(current)
                    current = ""
                pages.append(line[:PAGE_CHARS])
                line = line[PAGE_CHARS:]
            if len(current) + len(line) > PAGE_CHARS:
                pages.append(current)
                current = ""
            current += line
        if current:
            pages.append(current)
        return pages


def _write_file(directory: Path, document: ExportDocument) -> Path:
    """The document as a file the bot's own account alone can read; stale ones removed."""
    directory.mkdir(parents=True, exist_ok=True)
    now = time.time()
    for old in directory.glob("memory_export_*.json"):
        with contextlib.suppress(OSError):
            if now - old.stat().st_mtime > STALE_EXPORT_SECONDS:
                old.unlink()
    path = directory / document.name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(document.text)
    return path


def _remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def _kept_lines(counts: ForgetCounts) -> list[str]:
    return ["以下不会删除：", *[f"- {line}" for line in counts.kept()]]


def _preview_text(counts: ForgetCounts) -> str:
    lines = ["将永久删除机器人保存的你的以下数据（删除后无法恢复，备份中的也会一并删除）："]
    lines += [f"- {line}" for line in counts.removed()]
    lines += _kept_lines(counts)
    lines.append(f"确认删除请在 {CONFIRM_SECONDS // 60} 分钟内发送：/memory user forget confirm")
    return "\n".join(lines)


def _done_text(counts: ForgetCounts) -> str:
    lines = ["已删除机器人保存的你的数据：", *[f"- {line}" for line in counts.removed()]]
    if counts.backups:
        lines.append(f"已从 {counts.backups} 份备份中删除你的 {counts.backup_rows} 条数据。")
    lines += _kept_lines(counts)
    lines.append("旧备份今后恢复时也不会再带回已删除的数据；你之后说的话会照常被记住。")
    return "\n".join(lines)


class UserCommands:
    """The export and the forget of the caller's own data."""

    def __init__(
        self,
        data: UserData,
        export_dir: Path,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.data = data
        self.export_dir = export_dir
        self.clock = clock
        self._asked: dict[str, float] = {}
        """User id → deadline of their forget's confirmation."""

    # -- forget ----------------------------------------------------------------------

    async def forget(self, scope: Scope, argument: str) -> str:
        """``/memory user forget`` (preview, then wait) or ``… forget confirm`` (do it)."""
        if scope.in_group:
            return "遗忘只在私聊中进行：请私聊我发送 /memory user forget"
        user_id = scope.user_id
        word = argument.strip().lower()
        now = self.clock()
        self._asked = {u: t for u, t in self._asked.items() if t >= now}
        if word and word not in _CONFIRM:
            return "用法：/memory user forget（查看将删除的内容），再发送 /memory user forget confirm 确认"
        if not word:
            result = await guard_tool_call(
                "[Memory]", "forget_preview", lambda: self._preview(user_id)
            )
            if not result["ok"]:
                return f"统计失败：{result['error']}"
            self._asked[user_id] = now + CONFIRM_SECONDS
            return str(result["text"])
        if self._asked.pop(user_id, None) is None:
            return (
                "没有待确认的删除：请先发送 /memory user forget 查看将删除的内容，"
                f"再在 {CONFIRM_SECONDS // 60} 分钟内发送 /memory user forget confirm"
            )
        result = await guard_tool_call("[Memory]", "forget", lambda: self._forget(user_id))
        if not result["ok"]:
            return (
                f"删除未完成：{result['error']}\n已删除的部分不会恢复；"
                "请稍后重新发送 /memory user forget 完成剩余部分"
            )
        return str(result["text"])

    async def _preview(self, user_id: str) -> dict[str, Any]:
        return {"ok": True, "text": _preview_text(await self.data.preview(user_id))}

    async def _forget(self, user_id: str) -> dict[str, Any]:
        return {"ok": True, "text": _done_text(await self.data.forget(user_id))}

    # -- export ----------------------------------------------------------------------

    async def export(self, scope: Scope, argument: str, upload: Upload, send: Send) -> str:
        """``/memory user export [页码]``: send the document; the closing reply."""
        if scope.in_group:
            return "导出只在私聊中进行：请私聊我发送 /memory user export"
        word = argument.strip()
        if word and (not word.isdigit() or int(word) < 1):
            return "用法：/memory user export（发送文件，不支持时分页发送文字）或 /memory user export <页码>"
        user_id = scope.user_id
        result = await guard_tool_call("[Memory]", "export", lambda: self._document(user_id))
        if not result["ok"]:
            return f"导出失败：{result['error']}"
        document: ExportDocument = result["document"]
        logger.info(f"[Memory] 用户 {user_id} 导出自己的数据（{len(document.text)} 字）")
        note = ""
        if not word:
            if await self._upload(document, upload):
                return f"已把你的数据以文件 {document.name} 发送给你（JSON 格式）"
            word, note = "1", "（当前的 QQ 协议端无法发送文件，改为文字发送）"
        try:
            return await self._send_pages(document, int(word), send, note)
        except Exception as exc:  # the OneBot side failed mid-way; never a traceback in chat
            logger.warning(f"[Memory] 导出的分页发送中断：{exc.__class__.__name__}")
            return (
                f"发送中断（{exc.__class__.__name__}），可稍后发送 /memory user export {word} 重试"
            )

    async def _document(self, user_id: str) -> dict[str, Any]:
        return {"ok": True, "document": ExportDocument.of(user_id, await self.data.export(user_id))}

    async def _upload(self, document: ExportDocument, upload: Upload) -> bool:
        """Send the file; ``False`` when the OneBot implementation cannot (any failure)."""
        try:
            path = await asyncio.to_thread(_write_file, self.export_dir, document)
        except OSError as exc:
            logger.warning(f"[Memory] 导出文件写入失败，改为分页发送：{exc.__class__.__name__}")
            return False
        try:
            await upload(path, document.name)
        except Exception as exc:  # ActionFailed, unsupported API, network: text pages instead
            logger.info(
                f"[Memory] upload_private_file 不可用（{exc.__class__.__name__}），改为分页发送"
            )
            return False
        finally:
            await asyncio.to_thread(_remove, path)
        return True

    async def _send_pages(self, document: ExportDocument, first: int, send: Send, note: str) -> str:
        pages = document.pages()
        if first > len(pages):
            return f"导出内容共 {len(pages)} 页，没有第 {first} 页"
        last = min(first + PAGES_PER_REPLY - 1, len(pages))
        await send(
            f"你的数据（JSON）共 {len(pages)} 页，以下是第 {first}–{last} 页{note}；"
            "按顺序把各页原样拼接起来就是完整的文档。"
        )
        for page in pages[first - 1 : last]:
            await send(page)
        if last < len(pages):
            return f"还有 {len(pages) - last} 页：发送 /memory user export {last + 1} 继续"
        return "导出完毕"
