"""Operator doors stay where operators are: part of ``check_architecture.py`` (stdlib only).

Every per-user store reads through a ``storage/scope.View``; what reads a whole store
(every partition, every user) is a separately named *operator door*
(``MemoryStore.count_all``, ``ArchiveStore.list_all``, ``operator_view``, ...). The
code that serves a chat turn (:data:`CHAT_PATH`) must not reach one, or a chat reply
could carry another user's data. Two rules, on every module of the chat path:

* **imports**: no name of :data:`DOORS` imported (``from ..storage.scope import
  operator_view``), and no module of :data:`OPERATOR_MODULES` (the console, the CLI,
  re-embedding, the whole-store work of ``upkeep/``);
* **attribute use**: no ``<anything>.<door>`` (``store.count_all()``,
  ``store.archive.list_all()``, ``scope_module.operator_view(...)``) and no bare name
  of a door, on any object: the checker cannot know an object's type, and these names
  mean "everyone" wherever they appear.

:data:`ALLOWED` names the exceptions, module by module, where a chat-path module
legitimately serves an operator (none today: a user's own archive listing goes through
the ``View`` of their partition). Framework glue for operators (the console's routes,
the archive sweep's schedule) is :data:`OPERATOR_GLUE`, outside the chat path.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping

# Module prefixes (relative to the package) of the code that serves a chat turn.
CHAT_PATH: tuple[str, ...] = (
    "adapters",
    "tools",
    "active",
    "groups",
    "prompting",
    "subconscious.toolsets",
)

# Framework glue that serves operators, not a chat turn (inside ``adapters/``).
OPERATOR_GLUE: tuple[str, ...] = (
    "adapters.console_auth",
    "adapters.console_http",
    "adapters.console_setup",
    "adapters.archive_hooks",
)

# The names of the whole-store reads and of what builds an operator's view.
DOORS: frozenset[str] = frozenset(
    {
        "count_all",  # MemoryStore, ArchiveStore
        "iter_all_records",
        "scan_all",
        "fetch_anywhere",
        "list_all",  # ArchiveStore
        "row_ids",  # ArchiveStore: rows by a raw ``where``
        "metadatas",
        "iter_rows",
        "rewrite_partition_keys",
        "messages_of",  # WindowStore: one user's messages in every group (export)
        "recent_any",  # WindowStore: any group's window by id (a turn reads its GroupView's)
        "of_user_anywhere",  # PersonaStore: any user's persona by id (console, export)
        "of_users_anywhere",
        "users_over",  # UsageLedger: every user's spend of a day
        "operator_view",
        "of_operator",  # Scope.of_operator
        "pending_batch",  # MemoryStore: pending memories of every partition
        "count_pending",
        "settle",  # MemoryStore: a pending memory's vector stored (the background embedding)
    }
)

# Modules that serve operators only (prefixes relative to the package).
OPERATOR_MODULES: tuple[str, ...] = (
    "console",
    "cli",
    "embedding",
    "upkeep.listing",
    "upkeep.rekey",
    "upkeep.importing",
    "upkeep.adoption",
    "upkeep.archive.sweep",
    "upkeep.users.erase",
)

# module (relative to the package) -> the doors it may use (a chat-path module serving
# an operator); kept small and explicit.
ALLOWED: dict[str, frozenset[str]] = {}


def _named(rel: str, prefixes: Iterable[str]) -> bool:
    return any(rel == p or rel.startswith(p + ".") for p in prefixes)


def _uses(tree: ast.Module) -> list[tuple[int, str, str]]:
    """``(line, door, how)`` for every door a module imports by name or uses."""
    found: list[tuple[int, str, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            found += [
                (node.lineno, a.name, f"imports {a.name}") for a in node.names if a.name in DOORS
            ]
        elif isinstance(node, ast.Attribute) and node.attr in DOORS:
            found.append((node.lineno, node.attr, f"uses .{node.attr}"))
        elif isinstance(node, ast.Name) and node.id in DOORS:
            found.append((node.lineno, node.id, f"uses {node.id}"))
    return found


def door_problems(
    trees: Mapping[str, tuple[str, ast.Module]],
    imports: Iterable[tuple[str, str, str, int]],
    package: str,
    *,
    chat_path: tuple[str, ...] = CHAT_PATH,
    operator_glue: tuple[str, ...] = OPERATOR_GLUE,
    operator_modules: tuple[str, ...] = OPERATOR_MODULES,
    allowed: Mapping[str, frozenset[str]] = ALLOWED,
) -> list[str]:
    """Problems: a chat-path module (``trees``: module -> (path, tree)) that imports or uses
    an operator door, or imports an operator module (``imports``: (importer, imported,
    path, line))."""

    def rel(module: str) -> str:
        return module[len(package) + 1 :] if module != package else ""

    def on_chat_path(module: str) -> bool:
        r = rel(module)
        return _named(r, chat_path) and not _named(r, operator_glue)

    problems: list[str] = []
    for module, (path, tree) in sorted(trees.items()):
        if not on_chat_path(module):
            continue
        permitted = allowed.get(rel(module), frozenset())
        for line, door, how in sorted(_uses(tree)):
            if door not in permitted:
                problems.append(
                    f"{path}:{line}: operator door on the chat path: {module} {how} "
                    f"(a read of everyone; read one user's data through a storage.scope.View)"
                )
    for importer, imported, path, line in sorted(imports, key=lambda i: (i[2], i[3], i[1])):
        if on_chat_path(importer) and _named(rel(imported), operator_modules):
            problems.append(
                f"{path}:{line}: operator module on the chat path: {importer} imports "
                f"{imported} (it serves operators only)"
            )
    return problems
