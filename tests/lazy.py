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
    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        module: ModuleType = importlib.import_module(self._name)
        return getattr(module, attr)


def lazy_import(name: str) -> Any:
    """A stand-in that imports ``name`` on first attribute access."""
    return _LazyModule(name)
