"""Errors of re-embedding and backups; messages are meant for operators."""

from __future__ import annotations

from pathlib import Path

from ..core.errors import ErrorKind, PluginError

__all__ = ["BackupError", "RemapError", "RemapFailed"]


class RemapError(PluginError, RuntimeError):
    """A remap could not be completed; the message is meant for operators."""

    kind = ErrorKind.FAILED


class RemapFailed(RemapError):
    """A remap failed before its commit point: everything is as it was before."""

    def __init__(self, cause: BaseException, backup: Path | None) -> None:
        where = f"；备份：{backup}" if backup is not None else ""
        super().__init__(f"重映射失败：{cause}。所有记忆仍在原集合中，嵌入指纹未改动{where}")
        self.cause = cause
        self.backup = backup


class BackupError(PluginError, RuntimeError):
    """A backup file could not be written or read; the message is meant for operators."""

    kind = ErrorKind.INVALID
