"""The user docs document every configuration key with its real default.

The spec is not shipped with the repository, so the user docs (README.md and
docs/*.md; the keys live in docs/configuration.md) are the only place an operator
can look a key up. These tests find the one doc that holds the ``.env`` table and
the one that holds the config reference, read their tables and compare them with
``EnvConfig`` / ``ConfigFile``: a key added to the code but not to the docs (or a
default changed in one place only) fails here, and so does a config section
missing from the README's "where each section is documented" table. They also
load the example chat configuration of the README's walk-through with Amrita's
own models, so the files a newcomer copies are ones Amrita accepts.
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from tests.lazy import lazy_import

# The plugin package is importable only once NoneBot has loaded it (pitfall P10).
C = lazy_import("amrita_plugin_memory.core.config")

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
ENV_HEADING = "## 环境变量（`.env`）"
KEYS_HEADING = "### 全部配置键"
EXAMPLES = ROOT / "docs" / "examples" / "chat"

_ROW = re.compile(r"^\| `([A-Za-z_]+)`\s*\|(.*)$", re.M)
_EMPTY = "（空）"
_DERIVED = "留空"


def _region(text: str, heading: str) -> str:
    """The text from ``heading`` (a whole line) to the next heading of the same or a higher level."""
    match = re.search(rf"^{re.escape(heading)}$", text, re.M)
    assert match, f"no heading {heading!r}"
    level = len(heading) - len(heading.lstrip("#"))
    rest = text[match.end() :]
    end = re.search(rf"^#{{1,{level}}} ", rest, re.M)
    return rest[: end.start()] if end else rest


def _cells(row_tail: str) -> list[str]:
    return [cell.strip() for cell in row_tail.strip().strip("|").split("|")]


def env_rows(text: str) -> dict[str, str]:
    """``KEY -> default cell`` of the ``.env`` table (columns: key, type, default, meaning)."""
    table = _region(text, ENV_HEADING)
    return {key: _cells(tail)[1] for key, tail in _ROW.findall(table)}


def config_rows(text: str) -> dict[str, dict[str, str]]:
    """``section -> key -> default cell`` of the config reference ("" = top level)."""
    reference = _region(text, KEYS_HEADING)
    sections: dict[str, dict[str, str]] = {}
    for block in re.split(r"^#### ", reference, flags=re.M)[1:]:
        title = block.splitlines()[0]
        named = re.match(r"`\[([a-z_]+)\]`", title)
        name = named.group(1) if named else ""
        assert name not in sections, f"section {name or '顶层'} documented twice"
        sections[name] = {key: _cells(tail)[0] for key, tail in _ROW.findall(block)}
    return sections


def _same(documented: Any, default: Any) -> bool:
    if isinstance(default, bool) or isinstance(documented, bool):
        return documented is default
    if isinstance(default, int | float) and isinstance(documented, int | float):
        return math.isclose(documented, default)
    return documented == default


def env_default_matches(cell: str, default: Any) -> bool:
    if cell == _EMPTY:
        return default == ""
    value = cell.strip("`")
    if isinstance(default, bool):
        return value == str(default).lower()
    if isinstance(default, int | float):
        return _same(float(value), default)
    if isinstance(default, dict):
        return json.loads(value) == default
    return value == str(default)


def config_default_matches(cell: str, default: Any) -> bool:
    if default is None:  # derived from another key
        return cell.startswith(_DERIVED)
    if not (cell.startswith("`") and cell.endswith("`")):
        return False
    documented = tomllib.loads(f"v = {cell.strip('`')}")["v"]
    return _same(documented, default)


def config_defaults() -> dict[str, dict[str, Any]]:
    """``section -> key -> default`` from ``ConfigFile`` ("" = top level)."""
    defaults = C.ConfigFile()
    result: dict[str, dict[str, Any]] = {"": {}}
    for name in C.ConfigFile.model_fields:
        value = getattr(defaults, name)
        if isinstance(value, BaseModel):
            result[name] = {key: getattr(value, key) for key in type(value).model_fields}
        else:
            result[""][name] = value
    return result


def env_problems(text: str) -> list[str]:
    rows = env_rows(text)
    defaults = C.EnvConfig.model_construct()
    problems = [
        f"{key} 未写进文档"
        for key in (k.upper() for k in C.EnvConfig.model_fields)
        if key not in rows
    ]
    for key, cell in rows.items():
        if key.lower() not in C.EnvConfig.model_fields:
            problems.append(f"文档中的 {key} 不是 EnvConfig 的键")
        elif not env_default_matches(cell, getattr(defaults, key.lower())):
            problems.append(
                f"{key} 的默认值写成了 {cell}，代码中为 {getattr(defaults, key.lower())!r}"
            )
    return problems


def config_problems(text: str) -> list[str]:
    rows = config_rows(text)
    problems: list[str] = []
    for section, keys in config_defaults().items():
        label = f"[{section}]" if section else "顶层"
        documented = rows.get(section)
        if documented is None:
            problems.append(f"{label} 表未写进文档")
            continue
        problems += [f"{label} {key} 未写进文档" for key in keys if key not in documented]
        problems += [f"文档中的 {label} {key} 不是配置键" for key in documented if key not in keys]
        for key, cell in documented.items():
            if key in keys and not config_default_matches(cell, keys[key]):
                problems.append(f"{label} {key} 的默认值写成了 {cell}，代码中为 {keys[key]!r}")
    problems += [f"文档中的 [{name}] 不是配置表" for name in rows if name not in config_defaults()]
    return problems


def user_docs() -> list[Path]:
    return [README, *sorted((ROOT / "docs").glob("*.md"))]


def documented_in(heading: str) -> Path:
    """The one user doc holding ``heading`` (a second copy would go stale)."""
    holders = [
        p for p in user_docs() if re.search(rf"^{re.escape(heading)}$", p.read_text("utf-8"), re.M)
    ]
    assert len(holders) == 1, f"{heading!r} 出现在 {[p.name for p in holders]}，应恰好一处"
    return holders[0]


def test_every_env_key_is_documented_with_its_default() -> None:
    assert env_problems(documented_in(ENV_HEADING).read_text(encoding="utf-8")) == []


def test_every_config_file_key_is_documented_with_its_default() -> None:
    assert config_problems(documented_in(KEYS_HEADING).read_text(encoding="utf-8")) == []


def test_the_check_catches_an_undocumented_key_and_a_wrong_default() -> None:
    """The comparison itself can fail: drop one row, change one default."""
    text = documented_in(KEYS_HEADING).read_text(encoding="utf-8")
    dropped = re.sub(r"^\| `keyword_weight` \|.*\n", "", text, count=1, flags=re.M)
    assert "[retrieval] keyword_weight 未写进文档" in config_problems(dropped)
    changed = text.replace("| `memo_max_chars` | `1000` |", "| `memo_max_chars` | `2000` |", 1)
    assert any("memo_max_chars 的默认值" in p for p in config_problems(changed))
    env_text = documented_in(ENV_HEADING).read_text(encoding="utf-8")
    no_env = re.sub(r"^\| `REEMBED_BACKUP_KEEP` .*\n", "", env_text, count=1, flags=re.M)
    assert env_problems(no_env) == ["REEMBED_BACKUP_KEEP 未写进文档"]


def section_index_problems(readme: str) -> list[str]:
    """Config sections missing from the README's "where each section is documented" table."""
    table = _region(readme, "## 配置写在哪里")
    return [
        f"[{name}] 不在 README 的“配置写在哪里”表中"
        for name in config_defaults()
        if name and not re.search(rf"^\| `\[{name}\]` \|", table, re.M)
    ]


def test_readme_says_where_each_config_section_is_documented() -> None:
    readme = README.read_text(encoding="utf-8")
    assert section_index_problems(readme) == []
    dropped = re.sub(r"^\| `\[persona\]` \|.*\n", "", readme, count=1, flags=re.M)
    assert section_index_problems(dropped) == ["[persona] 不在 README 的“配置写在哪里”表中"]


def test_example_chat_files_load_in_amrita() -> None:
    """The preset and chat config the walk-through copies are valid for Amrita and fit together."""
    from amrita.plugins.chat.config import Config
    from amrita_core import ModelPreset

    presets = sorted((EXAMPLES / "models").glob("*.json"))
    assert presets, "no example preset"
    names = set()
    for path in presets:
        raw = json.loads(path.read_text(encoding="utf-8"))
        unknown = set(raw) - set(ModelPreset.model_fields)
        assert not unknown, f"{path.name}: fields Amrita does not know: {unknown}"
        preset = ModelPreset.load(path)
        assert preset.model and preset.base_url.endswith("/v1") and preset.api_key
        names.add(preset.name)
    chat = Config.load_from_toml(EXAMPLES / "config.toml")
    assert chat.enable is True
    assert chat.preset in names
    assert chat.core.builtin.tool_calling_mode == "agent"  # the model sees the memory tools
    readme = README.read_text(encoding="utf-8")
    for path in presets:
        assert f"docs/examples/chat/models/{path.name}" in readme


@pytest.mark.parametrize("heading", ["## 从零到会记住的 Bot", "## 配置写在哪里"])
def test_newcomer_sections_exist(heading: str) -> None:
    assert re.search(rf"^{re.escape(heading)}$", README.read_text(encoding="utf-8"), re.M)


def test_no_doc_sends_the_operator_to_the_spec_for_keys() -> None:
    assert all("其余键见规范" not in p.read_text(encoding="utf-8") for p in user_docs())
