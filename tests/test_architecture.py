"""The layer rules of ARCHITECTURE.md hold, and the checker enforcing them really checks.

Only the standalone script ``.ci/check_architecture.py`` is imported (by path), never
the plugin itself.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / ".ci" / "check_architecture.py"


def _load_checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_architecture", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


arch = _load_checker()

FAKE = "fakepkg"


def _make_package(root: Path, files: dict[str, str]) -> Path:
    """Write ``files`` (paths relative to the fake package) under ``root``; return root."""
    pkg = root / FAKE
    for rel, text in {"__init__.py": "", **files}.items():
        path = pkg / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.parent != pkg and not (path.parent / "__init__.py").exists():
            (path.parent / "__init__.py").write_text("", encoding="utf-8")
        path.write_text(text, encoding="utf-8")
    return root


def test_repository_architecture_holds() -> None:
    problems = arch.check(ROOT)
    assert problems == [], "\n".join(problems)


def test_clean_fake_package_passes(tmp_path: Path) -> None:
    root = _make_package(
        tmp_path,
        {
            "core/errors.py": "class Boom(Exception):\n    pass\n",
            "storage/store.py": "from ..core.errors import Boom\n",
            "tools/memory_tools.py": "from ..storage import store\n",
        },
    )
    assert arch.check(root, package=FAKE) == []


def test_detects_cycle_behind_type_checking(tmp_path: Path) -> None:
    root = _make_package(
        tmp_path,
        {
            "storage/a.py": "from .b import thing\n",
            "storage/b.py": (
                "from typing import TYPE_CHECKING\n"
                "\n"
                "thing = 1\n"
                "\n"
                "if TYPE_CHECKING:\n"
                "    from . import a\n"
            ),
        },
    )
    problems = arch.check(root, package=FAKE)
    cycles = [p for p in problems if p.startswith("import cycle:")]
    assert len(cycles) == 1, problems
    assert f"{FAKE}.storage.a -> {FAKE}.storage.b -> {FAKE}.storage.a" in cycles[0]
    assert f"{FAKE}/storage/b.py:6" in cycles[0]


def test_detects_layer_violation_inside_function(tmp_path: Path) -> None:
    root = _make_package(
        tmp_path,
        {
            "adapters/events.py": "def caller():\n    return None\n",
            "tools/memory_tools.py": (
                "def run():\n    from ..adapters.events import caller\n\n    return caller()\n"
            ),
        },
    )
    problems = arch.check(root, package=FAKE)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{FAKE}/tools/memory_tools.py:2: layer violation:")
    assert "(tools)" in problems[0] and "(adapters)" in problems[0]


def test_detects_framework_import_in_core(tmp_path: Path) -> None:
    root = _make_package(tmp_path, {"core/log.py": "import pydantic\nfrom nonebot import logger\n"})
    problems = arch.check(root, package=FAKE)
    assert problems == [
        f"{FAKE}/core/log.py:2: core module {FAKE}.core.log imports framework package nonebot"
    ]


def test_detects_package_importing_the_launcher(tmp_path: Path) -> None:
    root = _make_package(
        tmp_path,
        {"cli/plumbing.py": "def run():\n    from amrita_plugin_memory_ctl import fail\n"},
    )
    problems = arch.check(root, package=FAKE)
    assert problems == [
        f"{FAKE}/cli/plumbing.py:2: {FAKE}.cli.plumbing imports the launcher amrita_plugin_memory_ctl"
    ]


@pytest.mark.parametrize(("lines", "too_long"), [(500, False), (501, True)])
def test_detects_overlong_module(tmp_path: Path, lines: int, too_long: bool) -> None:
    root = _make_package(tmp_path, {"core/big.py": "x = 1\n" * lines})
    problems = arch.check(root, package=FAKE)
    if too_long:
        assert problems == [f"{FAKE}/core/big.py: module too long: 501 lines (limit 500)"]
    else:
        assert problems == []
