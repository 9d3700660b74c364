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

A third rule keeps the ``/memory`` commands on one facade (issue #49 item 3): a module
``tools/*commands*.py`` reaches the memo and the archive only through
``tools/chat_stores.ChatStores`` (made from the turn's ``Scope``), so it uses no
``.archive`` or ``.memo`` attribute and names no ``MemoService`` / ``ArchiveStore``
(:func:`command_problems`).
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
    "episodes.recall",
    "episodes.recorder",
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
        "spent_by_all",  # UsageLedger: every user's background tokens of a day
        "totals_by_day",  # UsageLedger: every user's spend per day (the status report)
        "operator_user_view",  # a UserView of any user id (console, CLI, export, forget)
        "operator_view",
        "of_operator",  # Scope.of_operator
        "pending_batch",  # MemoryStore: pending memories of every partition
        "count_pending",
        "settle",  # MemoryStore: a pending memory's vector stored (the background embedding)
        "open_chats",  # EpisodeStore: every chat's waiting lines (the episode closer)
        "lines_of",
        "of_chat_any",  # EpisodeStore: any chat's episodes by key (console)
        "lines_of_user",  # EpisodeStore: one user's lines in every chat (export)
        "forget_user",  # EpisodeStore, GroupWindowStore, ...: a user's data everywhere (forget)
        "sweep_episodes",
        "restore_episode",
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


# The ``/memory`` commands' one facade (issue #49 item 3).
COMMAND_MODULES = "tools"
"""The layer of the command modules: ``tools.<name>`` with ``commands`` in ``<name>``."""
COMMAND_ATTRIBUTES: frozenset[str] = frozenset({"archive", "memo"})
"""Attributes a command module never uses: a store reached around the facade."""
COMMAND_NAMES: frozenset[str] = frozenset({"MemoService", "ArchiveStore"})
"""Names a command module never imports or uses: the stores behind the facade."""


def _command_module(rel: str) -> bool:
    layer, _, name = rel.rpartition(".")
    return layer == COMMAND_MODULES and "commands" in name


def command_problems(trees: Mapping[str, tuple[str, ast.Module]], package: str) -> list[str]:
    """Problems: a ``tools/*commands*.py`` module (``trees``: module -> (path, tree)) that
    touches the archive or a memo around ``tools/chat_stores.ChatStores``."""
    problems: list[str] = []
    for module, (path, tree) in sorted(trees.items()):
        if not module.startswith(package + ".") or not _command_module(module[len(package) + 1 :]):
            continue
        found: list[tuple[int, str]] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                found += [
                    (node.lineno, f"imports {a.name}")
                    for a in node.names
                    if a.name in COMMAND_NAMES
                ]
            elif isinstance(node, ast.Attribute) and node.attr in COMMAND_ATTRIBUTES:
                found.append((node.lineno, f"uses .{node.attr}"))
            elif isinstance(node, ast.Name) and node.id in COMMAND_NAMES:
                found.append((node.lineno, f"uses {node.id}"))
        problems += [
            f"{path}:{line}: a command reaches a store around its facade: {module} {how} "
            f"(use the turn's tools/chat_stores.ChatStores)"
            for line, how in sorted(found)
        ]
    return problems
