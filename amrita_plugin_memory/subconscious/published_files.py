"""The L3 loop's files as the published ``amrita-plugin-memory`` left them, taken over once.

Same places, other formats: the published knowledge base keeps ``knowledge_index.json`` as
a list and each ``knowledge/KNOWLEDGE_<kid>.md`` as ``# title`` / summary / ``---`` / body
(its vectors embed the summary only); its prompt templates under
``config/amrita_plugin_memory/prompt/`` (beside a ``README.md`` only it writes) use other
variables and tools. Its ``user_profile.md`` (``summary`` / ``---`` / body) is already
this plugin's format and is read as it is.

* :func:`set_aside_published_templates` (when the runner is built): the templates are
  moved to ``backups/published-prompts/`` and this plugin's defaults written in their place.
* :func:`import_published_knowledge` (the knowledge base's start-up check): the published
  files are moved to ``backups/published-knowledge/`` (that copy is the backup), then every
  entry is created again **through** :class:`~.knowledge_base.KnowledgeBaseManager` (so the
  import follows wherever the knowledge base keeps its data), new ids recorded in
  ``imported.json`` and in queued knowledge suggestions. Resumable: an entry already in the
  knowledge base (same title, summary and body) is not created twice, and the marker file
  is written last.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nonebot import logger

from ..core.text import single_line
from ..infra.files import atomic_write_text
from .knowledge_base import (
    SUMMARY_MAX,
    TITLE_MAX,
    KnowledgeBaseManager,
    KnowledgeError,
    ValidationReport,
    check_knowledge_base,
)
from .knowledge_docs import FILE_PREFIX, INDEX_FILE
from .state import LoopState
from .templates import PromptTemplates

__all__ = [
    "BACKUPS",
    "KNOWLEDGE_BACKUP",
    "PROMPTS_BACKUP",
    "PublishedEntry",
    "check_adopted_knowledge",
    "import_published_knowledge",
    "set_aside_published_templates",
]

BACKUPS = "backups"
"""The data directory's backup folder (``core/config.PluginConfig.backup_dir``)."""
KNOWLEDGE_BACKUP = "published-knowledge"
PROMPTS_BACKUP = "published-prompts"
DONE_FILE = "imported.json"
_SEPARATOR = re.compile(r"^---\s*$", re.MULTILINE)
_TEMPLATE_KEYS = ("prompt_file", "prompt_send_file", "prompt_knowledge_file", "prompt_profile_file")


@dataclass(frozen=True, slots=True)
class PublishedEntry:
    """One published knowledge entry as this plugin's fields (over-long headers cut,
    their whole text kept at the top of the body)."""

    kid: str
    title: str
    summary: str
    body: str

    @classmethod
    def parse(cls, kid: str, text: str) -> PublishedEntry:
        first, _, rest = text.partition("\n")
        parts = _SEPARATOR.split(rest, maxsplit=1)
        title = single_line(first.lstrip("#")) or kid
        summary = single_line(parts[0]) if parts else ""
        body = parts[1].strip("\n") if len(parts) > 1 else ""
        kept: list[str] = []
        if len(title) > TITLE_MAX:
            kept.append(title)
            title = title[: TITLE_MAX - 1] + "…"
        if len(summary) > SUMMARY_MAX:
            kept.append(summary)
            summary = summary[: SUMMARY_MAX - 1] + "…"
        body = "\n".join([*kept, body]).strip("\n") if kept else body
        return cls(kid, title, summary or title, body or summary or title)


def _is_published(path: Path) -> bool:
    try:
        return path.read_text(encoding="utf-8").startswith("# ")
    except (OSError, UnicodeDecodeError):
        return False


def _published_index(root: Path) -> bool:
    try:
        return isinstance(json.loads((root / INDEX_FILE).read_text(encoding="utf-8")), list)
    except (OSError, ValueError):
        return False


def _move_aside(root: Path, backup: Path) -> list[Path]:
    """Move the published files into ``backup`` (copy first, then remove: a kill in between
    leaves both); the backed-up entry files."""
    target = backup / "knowledge"
    target.mkdir(parents=True, exist_ok=True)
    knowledge = root / "knowledge"
    for path in sorted(knowledge.glob(f"{FILE_PREFIX}*.md")) if knowledge.is_dir() else []:
        if _is_published(path):
            if not (target / path.name).exists():
                atomic_write_text(target / path.name, path.read_text(encoding="utf-8"))
            path.unlink()
    if _published_index(root):
        index = root / INDEX_FILE
        if not (backup / INDEX_FILE).exists():
            shutil.copy2(index, backup / INDEX_FILE)
        index.unlink()
    return sorted(target.glob(f"{FILE_PREFIX}*.md"))


def _entries(files: list[Path]) -> list[PublishedEntry]:
    return [
        PublishedEntry.parse(path.stem[len(FILE_PREFIX) :], path.read_text(encoding="utf-8"))
        for path in files
    ]


async def _existing(kb: KnowledgeBaseManager, entry: PublishedEntry) -> str | None:
    for item in await kb.list():
        if item["title"] == entry.title and item["summary"] == entry.summary:
            if (await kb.get(item["kid"])).body == entry.body:
                return str(item["kid"])
    return None


@dataclass(slots=True)
class KnowledgeImport:
    """What :func:`import_published_knowledge` did: old id → new id, and what failed."""

    ids: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


async def import_published_knowledge(
    kb: KnowledgeBaseManager, state: LoopState | None = None
) -> KnowledgeImport | None:
    """Take over the published knowledge base under ``kb.root`` (``None``: nothing to do)."""
    backup = kb.root / BACKUPS / KNOWLEDGE_BACKUP
    if (backup / DONE_FILE).exists():
        return None

    def scan() -> list[Path] | None:
        knowledge = kb.root / "knowledge"
        found = _published_index(kb.root) or any(
            _is_published(p)
            for p in (knowledge.glob(f"{FILE_PREFIX}*.md") if knowledge.is_dir() else [])
        )
        return _move_aside(kb.root, backup) if found or backup.is_dir() else None

    files = await asyncio.to_thread(scan)
    if files is None:
        return None
    logger.warning(
        f"[Subconscious] 发现已发布的 amrita-plugin-memory 的知识库（{len(files)} 条），"
        f"原文件已移到 {backup}，正在导入本插件的知识库"
    )
    await kb.validate_on_startup()  # finishes an entry a killed import left half-written
    done = KnowledgeImport()
    for entry in await asyncio.to_thread(_entries, files):
        try:
            kid = (
                await _existing(kb, entry)
                or (await kb.create(entry.title, entry.summary, entry.body)).kid
            )
        except KnowledgeError as exc:
            done.failed[entry.kid] = str(exc)
            logger.warning(
                f"[Subconscious] 已发布插件的知识 {entry.kid} 无法导入（原文件保留在备份中）：{exc}"
            )
            continue
        done.ids[entry.kid] = kid
    if state is not None and done.ids:
        await state.mutate(lambda data: _renumber(data, done.ids))
    record = {"ids": done.ids, "failed": done.failed}
    await asyncio.to_thread(
        atomic_write_text, backup / DONE_FILE, json.dumps(record, ensure_ascii=False, indent=2)
    )
    logger.info(
        f"[Subconscious] 已导入已发布插件的 {len(done.ids)} 条知识（新旧 ID 对照见 {backup / DONE_FILE}）"
    )
    return done


async def check_adopted_knowledge(
    kb: KnowledgeBaseManager, state: LoopState | None = None
) -> ValidationReport | None:
    """The knowledge base's start-up check: the published plugin's knowledge imported first
    (a failure is logged and retried next start), then :func:`check_knowledge_base`."""
    try:
        await import_published_knowledge(kb, state)
    except Exception as exc:  # embedding service or vector store down: the next start retries
        logger.warning(
            "[Subconscious] 导入已发布插件的知识库失败（下次启动时继续）："
            f"{exc.__class__.__name__}: {exc}"
        )
    return await check_knowledge_base(kb)


def _renumber(data: Any, ids: dict[str, str]) -> None:
    """Queued suggestions that name an imported entry name its new id."""
    for suggestion in data.get("knowledge_suggestions", []):
        if suggestion.get("kid") in ids:
            suggestion["kid"] = ids[suggestion["kid"]]


def set_aside_published_templates(templates: PromptTemplates, backup_root: Path) -> list[Path]:
    """Move the published plugin's prompt templates to ``backups/published-prompts/``.

    Recognised by the ``README.md`` it writes beside them (this plugin writes none): its
    templates name variables and tools this loop does not have. This plugin's defaults
    are written in their place by :meth:`PromptTemplates.ensure` afterwards.
    """
    readme = templates.config_dir / "prompt" / "README.md"
    if not readme.is_file():
        return []
    target = backup_root / PROMPTS_BACKUP
    target.mkdir(parents=True, exist_ok=True)
    moved: list[Path] = []
    for path in [templates.path(key) for key in _TEMPLATE_KEYS] + [readme]:
        if path.is_file():
            destination = target / path.name
            n = 1
            while destination.exists():
                n += 1
                destination = target / f"{path.stem}.{n}{path.suffix}"
            shutil.move(path, destination)
            moved.append(destination)
    if moved:
        logger.warning(
            "[Subconscious] 已发布的 amrita-plugin-memory 的提示词模板用的是它自己的变量和工具，"
            f"已移到 {target}，改用本插件的默认模板（曾自定义过的内容请对照修改）"
        )
    return moved
