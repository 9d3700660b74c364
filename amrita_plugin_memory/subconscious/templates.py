"""The loop's Jinja2 prompt templates, and how the loop writes the time.

The time is the owner's (``[memory] timezone``: the runner's ``calendar``), never
the machine's: the loop tells a model "now" in the days its user lives in."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
from jinja2.sandbox import SandboxedEnvironment

from ..core.config import SubconsciousConfig
from ..core.errors import ErrorKind, PluginError
from .consts import DEFAULTS, TEMPLATE_VARIABLES, ensure_prompt_file

__all__ = ["PromptError", "PromptTemplates", "format_time"]


def format_time(moment: datetime) -> str:
    """``2026-11-30 21:05:00（周一）``: how the loop's prompts show a time (``moment`` in
    the owner's zone: ``OwnerCalendar.now``)."""
    weekdays = "一二三四五六日"
    return f"{moment:%Y-%m-%d %H:%M:%S}（周{weekdays[moment.weekday()]}）"


class PromptError(PluginError, RuntimeError):
    """A prompt template is missing, unreadable or broken; the message names the file."""

    kind = ErrorKind.INVALID


class PromptTemplates:
    """The four Jinja2 templates under ``<config_dir>/prompt/``, read on every use.

    Reading on use means an operator's edit applies to the next cycle without
    a restart. Rendering is sandboxed and strict: a variable the template does
    not get (see :data:`~.consts.TEMPLATE_VARIABLES`) is an error, not an empty
    string, so a typo cannot silently blank a section of the prompt.
    """

    def __init__(self, config_dir: Path, config: SubconsciousConfig) -> None:
        self.config_dir = config_dir
        self.config = config
        self._env = SandboxedEnvironment(
            undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=True
        )

    def path(self, key: str) -> Path:
        """The file of template ``key`` (a config key such as ``prompt_file``)."""
        return self.config_dir / str(getattr(self.config, key))

    def ensure(self) -> list[Path]:
        """Create every missing template from its default; the created paths."""
        created = []
        for key, default in DEFAULTS.items():
            path = self.path(key)
            if ensure_prompt_file(path, default):
                created.append(path)
        return created

    def render(self, key: str, variables: Mapping[str, Any]) -> str:
        """Render template ``key`` with exactly its listed variables."""
        allowed = TEMPLATE_VARIABLES[key]
        given = {name: variables[name] for name in allowed}
        path = self.path(key)
        try:
            source = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise PromptError(f"无法读取提示词模板 {path}：{exc}") from None
        try:
            template = self._env.from_string(source)
            return template.render(**given).strip()
        except jinja2.TemplateSyntaxError as exc:
            raise PromptError(
                f"提示词模板 {path} 第 {exc.lineno} 行语法错误：{exc.message}"
            ) from None
        except jinja2.UndefinedError as exc:
            raise PromptError(
                f"提示词模板 {path} 使用了未定义的变量（{exc.message}）；可用变量：{', '.join(allowed)}"
            ) from None
        except jinja2.TemplateError as exc:
            raise PromptError(f"提示词模板 {path} 渲染失败：{exc}") from None
