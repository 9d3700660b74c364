"""The L3 loop's user profile as a user's export and forget see it: one file about the target user.

The loop keeps what it learned about its target user in ``<data_dir>/user_profile.md``
(edited line by line by ``subconscious.profile_store.ProfileStore``, which
implements :class:`LoopProfile` under its own lock while a loop runs in this
process); :class:`ProfileFile` is the same file for a process without the
loop (the command line). A forget of the target user deletes the file.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Protocol

__all__ = [
    "PROFILE_FILE",
    "PROFILE_SEPARATOR",
    "LoopProfile",
    "ProfileFile",
    "profile_lines",
    "read_profile",
    "remove_profile",
]

PROFILE_FILE = "user_profile.md"
"""The profile's file name in the plugin's data directory."""
PROFILE_SEPARATOR = "---"
"""The line between the profile's summary and its body."""


def profile_lines(text: str) -> int:
    """Lines of content in a profile's text (the separator is not content)."""
    return sum(1 for line in text.splitlines() if line != PROFILE_SEPARATOR)


def read_profile(path: Path) -> str:
    """The file's text; ``""`` when there is none."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""


def remove_profile(path: Path) -> int:
    """Delete the file; the lines of content it had (0 when there was none)."""
    lines = profile_lines(read_profile(path))
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    return lines


class LoopProfile(Protocol):
    """The target user's profile, read and removed whole."""

    async def text(self) -> str:
        """The profile as stored (``""``: none)."""
        ...

    async def remove(self) -> int:
        """Delete the profile; its lines of content."""
        ...


class ProfileFile:
    """The profile file itself, for a process in which no loop runs."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def in_dir(cls, data_dir: Path) -> ProfileFile:
        return cls(data_dir / PROFILE_FILE)

    async def text(self) -> str:
        return await asyncio.to_thread(read_profile, self.path)

    async def remove(self) -> int:
        return await asyncio.to_thread(remove_profile, self.path)
