#!/usr/bin/env python3
"""Architecture check for the ``amrita_plugin_memory`` package (stdlib only).

Parses every ``.py`` file of the package (``migrations/`` excluded), collects
every intra-package import -- module level, inside ``if TYPE_CHECKING:`` blocks
and inside function bodies alike -- and fails on:

* an import cycle between modules of the package (the cycle path is reported);
* an import that goes against the layer order (see ``LAYERS`` / ARCHITECTURE.md);
* an import of a module private to another layer (``PRIVATE``), or of a layer's
  top (``TOPS``: ``storage/memory_store.py``) from below it in the same layer;
* a module longer than ``MAX_LINES`` lines;
* a module of a framework-free layer (``FRAMEWORK_FREE``: core, infra, ranking,
  prompting) importing a framework package (``FORBIDDEN_IN_CORE``);
* an intra-package import that names no module of the package (stale after a move);
* a module serving a chat turn that imports or uses an operator door, a read of every
  user (``architecture_doors.py`` beside this file: ``count_all``, ``operator_view``, ...);
* a module of the package importing the launcher ``amrita_plugin_memory_ctl`` (it
  imports ``cli``; the other way round would be a cycle through the entry point);
* ARCHITECTURE.md out of step with the code (``architecture_doc.py`` beside this
  file): a module missing from its layer's row of the layer table, a row naming a
  module that does not exist, a ``may import`` cell that differs from ``LAYERS``,
  a layer without a row, or a backticked path / ``module.Name`` / ``Class.member``
  that points at nothing.

Import resolution: ``from X import a`` counts as importing module ``X`` (for a
package, its ``__init__``) and, when ``X.a`` is itself a module, ``X.a`` too.
``import X.Y`` counts as importing ``X.Y`` only. Parent packages' ``__init__``
files that Python runs implicitly are not counted. Imports of modules outside
the package are ignored, except the launcher's.

Usage: ``python .ci/check_architecture.py [REPO_ROOT]``; exit 0 and a one-line
summary when clean, exit 1 and one line per problem otherwise. Tests call
:func:`check` directly.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

PACKAGE = "amrita_plugin_memory"
MAX_LINES = 500
EXCLUDED_DIRS = ("migrations",)
DOC = "ARCHITECTURE.md"

# (layer name, sub-module prefixes relative to the package, the layers right below it).
# The empty prefix "" is the package's own ``__init__``. A layer may import the
# modules of its own layer (but not cyclically) and of every layer reachable
# downwards from it (:data:`LAYERS`); never a layer beside or above it.
DIRECT: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("core", ("core",), ()),
    ("infra", ("infra",), ("core",)),
    ("ranking", ("ranking",), ("core",)),
    ("prompting", ("prompting",), ("core",)),
    ("storage", ("storage",), ("infra", "ranking", "prompting")),
    ("upkeep", ("upkeep",), ("storage",)),
    ("embedding", ("embedding",), ("upkeep",)),
    ("tools", ("tools",), ("upkeep",)),
    ("services", ("services",), ("tools", "embedding")),
    ("subconscious", ("subconscious",), ("services",)),
    ("groups", ("groups",), ("services",)),
    ("active", ("active",), ("groups",)),
    ("episodes", ("episodes",), ("groups",)),
    ("console", ("console",), ("active", "episodes", "subconscious")),
    ("adapters", ("adapters",), ("console",)),
    ("cli", ("cli",), ("services",)),
    ("plugin", ("",), ("cli", "adapters")),
)


def _closure(direct: tuple) -> tuple[tuple[str, tuple[str, ...], frozenset[str]], ...]:
    """(layer, prefixes, every layer it may import): the layers below, transitively."""
    below = {layer: set(lower) for layer, _, lower in direct}
    out = []
    for layer, prefixes, _ in direct:
        seen: set[str] = set()
        todo = list(below[layer])
        while todo:
            nxt = todo.pop()
            if nxt not in seen:
                seen.add(nxt)
                todo.extend(below[nxt])
        out.append((layer, prefixes, frozenset(seen)))
    return tuple(out)


LAYERS: tuple[tuple[str, tuple[str, ...], frozenset[str]], ...] = _closure(DIRECT)

# Modules private to their layer (prefixes relative to the package): memories are
# reached from outside ``storage/`` only through ``storage/memory_store.py``, which
# re-exports the few names the layers above need (``RetrievalSettings``, ``iter_pages``).
PRIVATE: dict[str, tuple[str, ...]] = {
    "storage": (
        "storage.partition",
        "storage.merge",
        "storage.room",
        "storage.archive.removal",
        "storage.chroma.paging",
    ),
}

# The top of a layer, which no other module of the layer imports: within ``storage/``
# every arrow points down (what is built on the store belongs in ``upkeep/``).
TOPS: dict[str, tuple[str, ...]] = {"storage": ("storage.memory_store",)}

# Layers that must run without the framework, and the top-level distributions
# their modules must not import (prefix match on the first dotted component,
# the package itself excepted).
FRAMEWORK_FREE = frozenset({"core", "infra", "ranking", "prompting"})
FORBIDDEN_IN_CORE = ("nonebot", "amrita", "chromadb")

LAUNCHER = "amrita_plugin_memory_ctl"
"""The ``ambot memory`` launcher beside the package: it imports ``cli``, never the reverse."""


def _load_beside(name: str) -> ModuleType:
    """``<name>.py`` beside this file (loaded by path: ``.ci`` is no package)."""
    path = Path(__file__).with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


doc_checks = _load_beside("architecture_doc")
door_checks = _load_beside("architecture_doors")


class Import:
    """One intra-package import: ``importer`` imports ``imported`` at ``path:line``."""

    __slots__ = ("imported", "importer", "line", "path")

    def __init__(self, importer: str, imported: str, path: str, line: int) -> None:
        self.importer = importer  # module name
        self.imported = imported  # module name (inside the package)
        self.path = path  # importer's file, relative to the root
        self.line = line


class Report:
    """Problems plus the numbers of the summary line."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.modules = 0
        self.imports = 0  # distinct importer -> imported module pairs
        self.cycles = 0
        self.largest: tuple[str, int] = ("-", 0)


class _Module:
    __slots__ = ("is_package", "lines", "name", "path", "tree")

    def __init__(
        self, name: str, path: Path, is_package: bool, lines: int, tree: ast.Module | None
    ) -> None:
        self.name = name
        self.path = path
        self.is_package = is_package  # an ``__init__.py``
        self.lines = lines
        self.tree = tree


def _module_name(package: str, pkg_dir: Path, file: Path) -> tuple[str, bool]:
    parts = list(file.relative_to(pkg_dir).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts = parts[:-1]
    return ".".join([package, *parts]), is_package


def _collect(root: Path, package: str, report: Report) -> tuple[dict[str, _Module], set[str]]:
    pkg_dir = root / package
    modules: dict[str, _Module] = {}
    dirs: set[str] = {package}  # every package directory, namespace packages included
    for file in sorted(pkg_dir.rglob("*.py")):
        rel_parts = file.relative_to(pkg_dir).parts
        if rel_parts[0] in EXCLUDED_DIRS or "__pycache__" in rel_parts:
            continue
        name, is_package = _module_name(package, pkg_dir, file)
        for i in range(1, len(rel_parts)):
            dirs.add(".".join([package, *rel_parts[:i]]))
        text = file.read_text(encoding="utf-8")
        rel = file.relative_to(root).as_posix()
        try:
            tree = ast.parse(text, filename=rel)
        except SyntaxError as exc:
            report.problems.append(f"{rel}:{exc.lineno}: syntax error: {exc.msg}")
            tree = None
        modules[name] = _Module(name, file, is_package, len(text.splitlines()), tree)
    return modules, dirs


def _resolve_from(mod: _Module, node: ast.ImportFrom) -> str | None:
    """The absolute dotted name of ``from <here> import ...``; None if it escapes."""
    if node.level == 0:
        return node.module or ""
    base = mod.name.split(".")
    if not mod.is_package:
        base = base[:-1]
    if node.level - 1 > len(base) - 1:
        return None
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _imports_of(
    mod: _Module, package: str, modules: dict[str, _Module], dirs: set[str], root: Path
) -> tuple[list[Import], list[tuple[str, int, str]], list[str]]:
    """(intra-package imports, external (path, line, top-level name), problems)."""
    found: list[Import] = []
    external: list[tuple[str, int, str]] = []
    problems: list[str] = []
    rel = mod.path.relative_to(root).as_posix()
    assert mod.tree is not None

    def inside(name: str) -> bool:
        return name == package or name.startswith(package + ".")

    def add(target: str, line: int) -> None:
        if target != mod.name:  # ``from . import x`` in an ``__init__`` names itself
            found.append(Import(mod.name, target, rel, line))

    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not inside(alias.name):
                    external.append((rel, node.lineno, alias.name.split(".")[0]))
                elif alias.name in modules:
                    add(alias.name, node.lineno)
                else:
                    problems.append(f"{rel}:{node.lineno}: unresolved import {alias.name}")
        elif isinstance(node, ast.ImportFrom):
            base = _resolve_from(mod, node)
            if base is None:
                problems.append(
                    f"{rel}:{node.lineno}: relative import beyond the top-level package"
                )
                continue
            if not inside(base):
                external.append((rel, node.lineno, base.split(".")[0]))
                continue
            if base in modules:
                add(base, node.lineno)
            elif base not in dirs:
                problems.append(f"{rel}:{node.lineno}: unresolved import {base}")
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in modules:
                    add(sub, node.lineno)
                elif base not in modules and alias.name != "*":
                    # A namespace package (no __init__.py): the name must be a module.
                    problems.append(f"{rel}:{node.lineno}: unresolved import {sub}")
    return found, external, problems


def _layer_of(name: str, package: str, layers: tuple) -> str | None:
    rel = name[len(package) + 1 :] if name != package else ""
    best: tuple[int, str] | None = None
    for layer, prefixes, _ in layers:
        for prefix in prefixes:
            if rel == prefix or (prefix and rel.startswith(prefix + ".")):
                if best is None or len(prefix) > best[0]:
                    best = (len(prefix), layer)
    return best[1] if best else None


def _find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One concrete cycle (``[a, b, ..., a]``) per strongly connected component."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    sccs: list[list[str]] = []
    counter = 0

    for start in sorted(graph):
        if start in index:
            continue
        # Iterative Tarjan.
        work: list[tuple[str, list[str]]] = [(start, sorted(graph[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop(0)
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph.get(nxt, ()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp: list[str] = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                if len(comp) > 1:
                    sccs.append(sorted(comp))

    cycles: list[list[str]] = []
    for comp in sccs:
        members = set(comp)
        first = comp[0]
        # Shortest path first -> ... -> first inside the component (BFS).
        parent: dict[str, str] = {}
        queue = [first]
        seen = {first}
        end: str | None = None
        while queue and end is None:
            cur = queue.pop(0)
            for nxt in sorted(graph.get(cur, ())):
                if nxt == first:
                    end = cur
                    break
                if nxt in members and nxt not in seen:
                    seen.add(nxt)
                    parent[nxt] = cur
                    queue.append(nxt)
        path = [first]
        node = end
        while node is not None and node != first:
            path.append(node)
            node = parent.get(node)
        cycles.append([first, *reversed(path[1:]), first])
    return cycles


def analyze(
    root: Path,
    package: str = PACKAGE,
    *,
    max_lines: int = MAX_LINES,
    layers: tuple = LAYERS,
    forbidden_in_core: tuple[str, ...] = FORBIDDEN_IN_CORE,
    framework_free: frozenset[str] = FRAMEWORK_FREE,
    launcher: str = LAUNCHER,
    private: dict[str, tuple[str, ...]] = PRIVATE,
    tops: dict[str, tuple[str, ...]] = TOPS,
    doc: str | None = DOC,
    doors: dict | None = None,
) -> Report:
    """Everything wrong under ``root/package`` (and in ``root/doc``, unless ``doc`` is None)."""
    root = Path(root)
    report = Report()
    if not (root / package).is_dir():
        report.problems.append(f"{package}: package directory not found under {root}")
        return report
    modules, dirs = _collect(root, package, report)
    report.modules = len(modules)

    imports: list[Import] = []
    external: list[tuple[str, int, str, str]] = []  # (path, line, top-level name, importer)
    for mod in modules.values():
        rel = mod.path.relative_to(root).as_posix()
        if mod.lines > max_lines:
            report.problems.append(f"{rel}: module too long: {mod.lines} lines (limit {max_lines})")
        if mod.lines > report.largest[1]:
            report.largest = (mod.path.relative_to(root / package).as_posix(), mod.lines)
        if mod.tree is None:
            continue
        found, ext, problems = _imports_of(mod, package, modules, dirs, root)
        imports.extend(found)
        external.extend((path, line, top, mod.name) for path, line, top in ext)
        report.problems.extend(problems)

    layer_of = {name: _layer_of(name, package, layers) for name in modules}
    allowed = {layer: may for layer, _, may in layers}
    for name in sorted(modules):
        if layer_of[name] is None:
            rel = modules[name].path.relative_to(root).as_posix()
            report.problems.append(f"{rel}: module {name} belongs to no layer")

    # The launcher imports the package (cli), never the reverse.
    for rel, line, top, importer in external:
        if top == launcher:
            report.problems.append(f"{rel}:{line}: {importer} imports the launcher {launcher}")

    # Framework imports from the framework-free layers.
    for rel, line, top, importer in external:
        layer = layer_of.get(importer)
        if layer not in framework_free or top == package:
            continue
        if any(top.startswith(prefix) for prefix in forbidden_in_core):
            report.problems.append(
                f"{rel}:{line}: {layer} module {importer} imports framework package {top}"
            )

    # Layer order.
    for imp in sorted(imports, key=lambda i: (i.path, i.line, i.imported)):
        src, dst = layer_of.get(imp.importer), layer_of.get(imp.imported)
        if src is None or dst is None or src == dst or dst in allowed.get(src, ()):
            continue
        report.problems.append(
            f"{imp.path}:{imp.line}: layer violation: {imp.importer} ({src}) "
            f"imports {imp.imported} ({dst}); {src} may import only "
            f"{', '.join(sorted(allowed.get(src, ()))) or 'nothing else'}"
        )

    # Operator doors stay off the chat path (``doors``: options of ``door_problems``).
    report.problems += door_checks.door_problems(
        {n: (m.path.relative_to(root).as_posix(), m.tree) for n, m in modules.items() if m.tree},
        [(i.importer, i.imported, i.path, i.line) for i in imports],
        package,
        **(doors or {}),
    )
    # The ``/memory`` commands reach the memo and the archive through one facade.
    report.problems += door_checks.command_problems(
        {n: (m.path.relative_to(root).as_posix(), m.tree) for n, m in modules.items() if m.tree},
        package,
    )

    # Private modules and the tops of layers.
    def named(module: str, prefixes: tuple[str, ...]) -> str | None:
        rel = module[len(package) + 1 :]
        return next((p for p in prefixes if rel == p or rel.startswith(p + ".")), None)

    for imp in sorted(imports, key=lambda i: (i.path, i.line, i.imported)):
        src, dst = layer_of.get(imp.importer), layer_of.get(imp.imported)
        if dst is None:
            continue
        if src != dst and named(imp.imported, private.get(dst, ())):
            report.problems.append(
                f"{imp.path}:{imp.line}: private module: {imp.importer} ({src}) imports "
                f"{imp.imported}, private to {dst} (use what {dst}'s door re-exports)"
            )
        top = tops.get(dst, ())
        if src == dst and named(imp.imported, top) and not named(imp.importer, top):
            report.problems.append(
                f"{imp.path}:{imp.line}: arrow back up: {imp.importer} imports "
                f"{imp.imported}, the top of {dst} (what is built on it belongs in a layer above)"
            )

    # Cycles.
    graph: dict[str, set[str]] = {name: set() for name in modules}
    where: dict[tuple[str, str], Import] = {}
    for imp in imports:
        graph[imp.importer].add(imp.imported)
        key = (imp.importer, imp.imported)
        if key not in where or imp.line < where[key].line:
            where[key] = imp
    report.imports = len(where)
    cycles = _find_cycles(graph)
    report.cycles = len(cycles)
    for cycle in cycles:
        hops = [where[(cycle[i], cycle[i + 1])] for i in range(len(cycle) - 1)]
        report.problems.append(
            "import cycle: "
            + " -> ".join(cycle)
            + " ("
            + ", ".join(f"{h.path}:{h.line}" for h in hops)
            + ")"
        )

    # The document.
    if doc is not None:
        doc_path = root / doc
        if not doc_path.is_file():
            report.problems.append(f"{doc}: not found under {root}")
        else:
            text = doc_path.read_text(encoding="utf-8")
            report.problems += doc_checks.table_problems(
                text, doc, root, package, {n: m.is_package for n, m in modules.items()}, layers
            )
            trees = {n: m.tree for n, m in modules.items() if m.tree is not None}
            report.problems += doc_checks.reference_problems(text, doc, root, package, trees)
    return report


def check(root: Path, package: str = PACKAGE, **options) -> list[str]:
    """Problems found under ``root/package`` (an empty list when the architecture holds)."""
    return analyze(root, package, **options).problems


def summary(report: Report) -> str:
    largest, lines = report.largest
    return (
        f"architecture: {report.modules} modules, {report.imports} imports, "
        f"{report.cycles} cycles, layers {'ok' if not report.problems else 'checked'}, "
        f"largest module {largest} ({lines} lines)"
    )


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent
    report = analyze(root)
    for problem in report.problems:
        print(problem)
    if report.problems:
        print(f"{summary(report)} -- {len(report.problems)} problem(s)")
        return 1
    print(summary(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
