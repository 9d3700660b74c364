"""Deferred imports for test modules.

The plugin package can only be imported after NoneBot has initialised and
loaded it (its ``__init__`` calls ``require``), while pytest imports test
modules before that. Test modules therefore bind plugin modules lazily.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class _LazyModule:
    def __init__(self, names: tuple[str, ...]) -> None:
        self._names = names

    def __getattr__(self, attr: str) -> Any:
        for name in self._names:
            module: ModuleType = importlib.import_module(name)
            if hasattr(module, attr):
                return getattr(module, attr)
        raise AttributeError(f"none of {self._names} has {attr!r}")


def lazy_import(*names: str) -> Any:
    """A stand-in that imports ``names`` on first attribute access (first that has it wins)."""
    return _LazyModule(names)
