"""The user profile: ``user_profile.md`` in ``summary---body`` form, edited by line.

The file has a short summary, a separator line ``---`` and a body. The L3
loop reads it through a sliding line window and edits it line range by line
range (replace / insert / delete), so the profile grows progressively instead
of being rewritten whole.

A line that is exactly ``---`` inside the summary or body would be read as the
separator; such lines are stored escaped (``\\---``) and unescaped on read,
so no content can corrupt the file structure. Writes are atomic.

The text has one home (``storage.users.loop_profile.profile_home``): the file
``user_profile.md`` when one process owns the store, a row of the shared database
when several do (remote mode), so every bot reads and edits the same profile; an
edit then holds a lease every process takes.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..core.errors import ErrorKind, PluginError
from ..storage.scope import UserView
from ..storage.shared.coherence import Coherence
from ..storage.users.loop_profile import (
    PROFILE_FILE,
    PROFILE_SEPARATOR,
    ForgottenAt,
    ProfileFile,
    ProfileHome,
    profile_home,
)

__all__ = ["PROFILE_FILE", "Profile", "ProfileError", "ProfileStore"]

SEPARATOR = PROFILE_SEPARATOR
MAX_LINE_CHARS = 500
MAX_LINES = 2000
MAX_WINDOW = 200

Section = Literal["summary", "body"]


class ProfileError(PluginError, ValueError):
    """A profile operation cannot be done; the message is meant for the model."""

    kind = ErrorKind.INVALID


def _escape(line: str) -> str:
    # "---" is the separator; "\---" would be ambiguous after escaping, so
    # every line made of a backslash run followed by "---" gains one more.
    stripped = line.lstrip("\\")
    return "\\" + line if stripped == SEPARATOR else line


def _unescape(line: str) -> str:
    stripped = line.lstrip("\\")
    return line[1:] if stripped == SEPARATOR and line.startswith("\\") else line


@dataclass(slots=True)
class Profile:
    summary: list[str] = field(default_factory=list)
    body: list[str] = field(default_factory=list)

    def render(self) -> str:
        lines = [_escape(x) for x in self.summary] + [SEPARATOR] + [_escape(x) for x in self.body]
        return "\n".join(lines) + "\n"

    @classmethod
    def parse(cls, text: str) -> Profile:
        lines = text.splitlines()
        if SEPARATOR in lines:
            cut = lines.index(SEPARATOR)
            head, tail = lines[:cut], lines[cut + 1 :]
        else:  # a hand-written file without separator: all of it is body
            head, tail = [], lines
        return cls([_unescape(x) for x in head], [_unescape(x) for x in tail])

    def section(self, name: Section) -> list[str]:
        return self.summary if name == "summary" else self.body


def _section(value: Any) -> Section:
    if value not in ("summary", "body"):
        raise ProfileError(f"section 的值 {value!r} 无效，允许的取值：summary, body")
    return value


def _line_no(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProfileError(f"{name} 必须是整数")
    if value < 1:
        raise ProfileError(f"{name} 必须 ≥ 1")
    return value


def _content_lines(content: Any) -> list[str]:
    if not isinstance(content, str):
        raise ProfileError("content 必须是字符串")
    lines = content.splitlines() or [""]
    if any(len(line) > MAX_LINE_CHARS for line in lines):
        raise ProfileError(f"单行不能超过 {MAX_LINE_CHARS} 字")
    return lines


class ProfileStore:
    """Reads and edits the profile (and, for a user's export and forget, reads and
    removes it whole: ``storage.users.loop_profile.LoopProfile``)."""

    def __init__(self, data_dir: Path, home: ProfileHome | None = None, subject: str = "") -> None:
        self.path = data_dir / PROFILE_FILE
        """The file (its home when one process owns the store; else migrated from)."""
        self.home: ProfileHome = home or ProfileFile(self.path, subject)
        self._lock = asyncio.Lock()

    @classmethod
    def of(
        cls,
        data_dir: Path,
        coherence: Coherence | None,
        subject: str = "",
        forgotten_at: ForgottenAt | None = None,
    ) -> ProfileStore:
        """The profile about ``subject`` (the loop's target user) of ``data_dir``, in the
        shared database when ``coherence`` is active (``storage.users.loop_profile``)."""
        return cls(data_dir, profile_home(data_dir, coherence, subject, forgotten_at))

    async def load(self) -> Profile:
        return Profile.parse(await self.home.text())

    async def exists(self) -> bool:
        """Whether a profile was written (and not removed)."""
        return await self.home.exists()

    async def read(
        self, section: Any = "body", start_line: Any = 1, end_line: Any = None
    ) -> dict[str, Any]:
        """A window of a section's lines (1-based, inclusive, at most 200)."""
        name = _section(section)
        start = _line_no(start_line, "start_line")
        lines = (await self.load()).section(name)
        total = len(lines)
        end = total if end_line is None else _line_no(end_line, "end_line")
        if end < start and end_line is not None:
            raise ProfileError("end_line 必须 ≥ start_line")
        end = min(end, total, start + MAX_WINDOW - 1)
        window = [f"{n}: {lines[n - 1]}" for n in range(start, end + 1)]
        return {"section": name, "total_lines": total, "start_line": start, "lines": window}

    async def update(
        self,
        operation: Any,
        *,
        section: Any = "body",
        start_line: Any = 1,
        end_line: Any = None,
        content: Any = None,
    ) -> dict[str, Any]:
        """Edit a line range.

        * ``replace``: lines ``start..end`` (default ``start``) become ``content``;
        * ``insert``: ``content`` is inserted before line ``start``
          (``start = total + 1`` appends);
        * ``delete``: lines ``start..end`` are removed.
        """
        if operation not in ("replace", "insert", "delete"):
            raise ProfileError(
                f"operation 的值 {operation!r} 无效，允许的取值：replace, insert, delete"
            )
        name = _section(section)
        start = _line_no(start_line, "start_line")
        async with self._lock, self.home.exclusive("修改用户画像"):
            profile = await self.load()
            lines = profile.section(name)
            total = len(lines)
            if operation == "insert":
                if start > total + 1:
                    raise ProfileError(
                        f"start_line 超出范围：{name} 共 {total} 行，插入位置最大为 {total + 1}"
                    )
                new = _content_lines(content)
                lines[start - 1 : start - 1] = new
            else:
                end = start if end_line is None else _line_no(end_line, "end_line")
                if end < start:
                    raise ProfileError("end_line 必须 ≥ start_line")
                if end > total:
                    raise ProfileError(f"行号超出范围：{name} 共 {total} 行")
                if operation == "replace":
                    lines[start - 1 : end] = _content_lines(content)
                else:
                    del lines[start - 1 : end]
            if len(profile.summary) + len(profile.body) > MAX_LINES:
                raise ProfileError(f"画像总行数不能超过 {MAX_LINES} 行，请先精简")
            await self.home.write(profile.render())
            return {"ok": True, "section": name, "total_lines": len(lines)}

    async def text(self) -> str:
        """The profile as stored (``""``: none)."""
        return await self.home.text()

    async def text_of(self, view: UserView) -> str:
        """The profile if it is about the user of ``view`` (a user's export; ``""``: none)."""
        return await self.home.text_of(view)

    async def remove_of(self, user_id: str) -> int:
        """Delete the profile about ``user_id`` and its copies (a forget); its lines.

        Under the edit lock, and the home's lease of the edits of every process
        (taken by the home itself), so an edit running now cannot write it back.
        """
        async with self._lock:
            return await self.home.remove_of(user_id)

    async def remove(self) -> int:
        """Delete the profile of the loop's target user (it was forgotten); its lines."""
        return await self.remove_of(self.home.subject)
