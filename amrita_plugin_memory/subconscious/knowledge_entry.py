"""One knowledge entry as a file: its header, its body, what is embedded.

The file (``knowledge/KNOWLEDGE_<kid>.md``) is the entry's source of truth; the
index and the vector of :mod:`.knowledge_base` are derived from it, so its
format lives apart from the manager that keeps the three in step.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..core.errors import ErrorKind, PluginError
from ..core.text import single_line

__all__ = ["SUMMARY_MAX", "TITLE_MAX", "KnowledgeEntry", "KnowledgeError", "header_field", "now"]

TITLE_MAX = 100
SUMMARY_MAX = 500


class KnowledgeError(PluginError, ValueError):
    """A knowledge operation cannot be done; the message is meant for the model."""

    kind = ErrorKind.INVALID


def now() -> str:
    """The timestamp format of entries (UTC, seconds)."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def header_field(value: Any, name: str, limit: int) -> str:
    """A validated one-line header value (newlines would break the file header)."""
    if not isinstance(value, str):
        raise KnowledgeError(f"参数 {name} 必须是字符串")
    text = single_line(value)
    if not text:
        raise KnowledgeError(f"参数 {name} 不能为空")
    if len(text) > limit:
        raise KnowledgeError(f"参数 {name} 过长（{len(text)} 字，上限 {limit} 字）")
    return text


@dataclass(slots=True)
class KnowledgeEntry:
    kid: str
    title: str
    summary: str
    body: str
    created_at: str = ""
    updated_at: str = ""

    def render(self) -> str:
        """The file text. Header values are JSON strings: any text round-trips."""
        header = {
            "kid": self.kid,
            "title": self.title,
            "summary": self.summary,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }
        lines = ["<!-- amrita_plugin_memory knowledge -->"]
        lines += [
            f"{key}: {json.dumps(value, ensure_ascii=False)}" for key, value in header.items()
        ]
        return (
            "\n".join(lines) + "\n\n" + self.body + ("\n" if not self.body.endswith("\n") else "")
        )

    @classmethod
    def parse(cls, text: str) -> KnowledgeEntry:
        head, sep, body = text.partition("\n\n")
        if not sep:
            raise KnowledgeError("知识文件缺少正文分隔空行")
        values: dict[str, str] = {}
        for line in head.splitlines()[1:]:
            key, _, raw = line.partition(": ")
            try:
                values[key] = json.loads(raw)
            except ValueError:
                raise KnowledgeError(f"知识文件头部无法解析：{line[:60]!r}") from None
        try:
            return cls(
                kid=values["kid"],
                title=values["title"],
                summary=values["summary"],
                body=body[:-1] if body.endswith("\n") else body,
                created_at=values.get("created_at", ""),
                updated_at=values.get("updated_at", ""),
            )
        except KeyError as exc:
            raise KnowledgeError(f"知识文件头部缺少 {exc.args[0]}") from None

    @property
    def document(self) -> str:
        """The text that is embedded."""
        return f"{self.title}\n{self.summary}\n{self.body}"

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.render().encode("utf-8")).hexdigest()

    def brief(self) -> dict[str, Any]:
        return {
            "kid": self.kid,
            "title": self.title,
            "summary": self.summary,
            "updated_at": self.updated_at,
        }
