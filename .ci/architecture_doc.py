"""ARCHITECTURE.md against the code (stdlib only; used by ``check_architecture.py``).

Two checks keep the document true:

* **The layer table** (the table whose first column is headed ``layer``): every
  layer of ``LAYERS`` has a row; the ``modules`` cell of a folder layer names
  every module of that folder (package ``__init__`` files excepted) and nothing
  else; the ``may import`` cell names exactly the layers the checker allows.
* **References**: every name in backticks that points into the repository --
  a path (``storage/memory_store.py``, ``tests/chat.py``), a module with
  attributes (``storage/memory_store.MemoryStore.remember``,
  ``services.MemoryRuntime``) or a class of the package with a member
  (``Scope.origins``) -- must exist.

Grammar of a ``modules`` cell: items separated by commas, each a module name
relative to the layer's folder, optionally followed by a note in parentheses
(notes may hold anything, commas included); ``;`` starts a group of a
subfolder, written ```sub/`: a, b``. A single-module layer (``services.py``,
``__init__.py``) describes its content freely. A ``may import`` cell lists
layer names separated by commas (notes in parentheses are ignored), or
``nothing``, or ``anything`` (every other layer).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Row", "parse_table", "reference_problems", "table_problems"]

_NAME = re.compile(r"^[A-Za-z_]\w*$")
_GROUP = re.compile(r"^`?([\w/]+?)/?`?\s*:\s*(.*)$", re.S)
_TICKED = re.compile(r"`([^`\n]+)`")
_PATHLIKE = re.compile(r"^[\w.*-]+(?:/[\w.*-]+)+/?$")
_DOTTED = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+$")


@dataclass(frozen=True, slots=True)
class Row:
    """One row of the layer table."""

    line: int
    layer: str  # the first cell without backticks, e.g. "storage", "services.py"
    modules: str
    may_import: str


def _cells(line: str) -> list[str]:
    """The cells of a Markdown table row (a ``|`` inside backticks does not split)."""
    cells: list[str] = []
    current: list[str] = []
    ticked = False
    for ch in line.strip().strip("|"):
        if ch == "`":
            ticked = not ticked
        if ch == "|" and not ticked:
            cells.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    cells.append("".join(current).strip())
    return cells


def parse_table(text: str) -> tuple[list[Row], list[str]]:
    """The rows of the layer table, and problems reading it."""
    lines = text.splitlines()
    for start, line in enumerate(lines):
        if not line.startswith("|"):
            continue
        header = [c.lower() for c in _cells(line)]
        if not header or header[0] != "layer":
            continue
        if "modules" not in header or "may import" not in header:
            return [], [
                f"line {start + 1}: the layer table needs 'modules' and 'may import' columns"
            ]
        i_mod, i_imp = header.index("modules"), header.index("may import")
        rows: list[Row] = []
        for number, row_line in enumerate(lines[start + 1 :], start + 2):
            if not row_line.startswith("|"):
                break
            cells = _cells(row_line)
            if set("".join(cells)) <= set("-: "):
                continue  # the separator row
            if len(cells) != len(header):
                return rows, [f"line {number}: {len(cells)} cells, the header has {len(header)}"]
            rows.append(Row(number, cells[0].strip("`"), cells[i_mod], cells[i_imp]))
        return rows, []
    return [], ["no layer table (a table whose first column is headed 'layer')"]


def _without_notes(text: str) -> str:
    """``text`` without its parenthesised notes (nested ones included)."""
    out: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")" and depth:
            depth -= 1
        elif not depth:
            out.append(ch)
    return "".join(out)


def _listed(cell: str) -> tuple[list[str], list[str]]:
    """Dotted module names (relative to the layer) named by a ``modules`` cell, and problems."""
    names: list[str] = []
    problems: list[str] = []
    for segment in _without_notes(cell).split(";"):
        segment = segment.strip()
        prefix = ""
        group = _GROUP.match(segment)
        if group:
            prefix, segment = group.group(1).replace("/", ".") + ".", group.group(2)
        for item in segment.split(","):
            item = item.strip().strip("`").strip()
            if not item:
                continue
            if not _NAME.match(item):
                problems.append(f"cannot read {item!r} as a module name")
                continue
            names.append(prefix + item)
    return names, problems


def _layer_names(cell: str, everything: Iterable[str], own: str) -> set[str]:
    words = {w.strip().strip("`").strip() for w in _without_notes(cell).split(",")}
    words.discard("")
    if words == {"anything"}:
        return set(everything) - {own}
    if words in ({"nothing"}, {"—"}, {"-"}):
        return set()
    return words


def table_problems(
    text: str,
    doc: str,
    root: Path,
    package: str,
    modules: Mapping[str, bool],
    layers: tuple,
) -> list[str]:
    """Problems of the layer table. ``modules``: every module name -> is a package ``__init__``."""
    rows, problems = parse_table(text)
    problems = [f"{doc}: {p}" for p in problems]
    by_prefix = {prefix: (layer, may) for layer, prefixes, may in layers for prefix in prefixes}
    names = [layer for layer, _, _ in layers]
    seen: set[str] = set()
    for row in rows:
        prefix = row.layer.rstrip("/").removesuffix(".py")
        prefix = "" if prefix == "__init__" else prefix.replace("/", ".")
        if prefix not in by_prefix:
            problems.append(f"{doc}:{row.line}: {row.layer!r} is no layer of the checker (LAYERS)")
            continue
        layer, may = by_prefix[prefix]
        seen.add(prefix)
        said = _layer_names(row.may_import, names, layer)
        if said != set(may):
            problems.append(
                f"{doc}:{row.line}: layer {layer} may import {', '.join(sorted(may)) or 'nothing'} "
                f"(LAYERS), the table says {', '.join(sorted(said)) or 'nothing'}"
            )
        folder = root / package / Path(*prefix.split(".")) if prefix else None
        if folder is None or not folder.is_dir():
            continue  # a single-module layer describes its content freely
        base = f"{package}.{prefix}."
        in_layer = {
            name[len(base) :]: is_pkg for name, is_pkg in modules.items() if name.startswith(base)
        }
        listed, unreadable = _listed(row.modules)
        problems += [f"{doc}:{row.line}: layer {layer}: {p}" for p in unreadable]
        for name in sorted(set(listed)):
            init = name.removesuffix("__init__").rstrip(".")
            if name not in in_layer and not (name.endswith("__init__") and in_layer.get(init)):
                if (
                    name.endswith("__init__")
                    and not init
                    and folder.joinpath("__init__.py").exists()
                ):
                    continue
                problems.append(f"{doc}:{row.line}: layer {layer} lists {name}, no module of it")
        for name, is_pkg in sorted(in_layer.items()):
            if not is_pkg and name not in listed:
                path = f"{package}/{prefix.replace('.', '/')}/{name.replace('.', '/')}.py"
                problems.append(
                    f"{path}: module {base}{name} is missing from the layer table of {doc} "
                    f"(row {row.layer})"
                )
    for layer, prefixes, _ in layers:
        if not any(p in seen for p in prefixes):
            problems.append(f"{doc}: layer {layer} has no row in the layer table")
    return problems


# -- references ------------------------------------------------------------------------


def _defined(body: list[ast.stmt]) -> set[str]:
    """Names that the statements of ``body`` define (functions, classes, assignments)."""
    names: set[str] = set()
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def _top_names(tree: ast.Module) -> set[str]:
    """What a module defines or imports at its top level."""
    names = _defined(tree.body)
    for node in tree.body:
        if isinstance(node, ast.ImportFrom | ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _members(cls: ast.ClassDef) -> set[str]:
    """What a class defines, and the ``self.x`` its methods assign."""
    names = _defined(cls.body)
    for node in ast.walk(cls):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        for t in targets:
            if (
                isinstance(t, ast.Attribute)
                and isinstance(t.value, ast.Name)
                and t.value.id == "self"
            ):
                names.add(t.attr)
    return names


class _Code:
    """The package's modules, classes and their members, for reference lookups."""

    def __init__(self, trees: Mapping[str, ast.Module]) -> None:
        self.trees = trees
        self.classes: dict[str, list[ast.ClassDef]] = {}
        for tree in trees.values():
            for node in tree.body:
                if isinstance(node, ast.ClassDef):
                    self.classes.setdefault(node.name, []).append(node)

    def has_member(self, cls: ast.ClassDef, name: str, depth: int = 0) -> bool:
        if name in _members(cls):
            return True
        for base in cls.bases:
            base_name = base.id if isinstance(base, ast.Name) else None
            for parent in self.classes.get(base_name or "", []):
                if depth < 5 and self.has_member(parent, name, depth + 1):
                    return True
        return False

    def attributes_problem(self, module: str, attrs: list[str]) -> str | None:
        """Why ``module.attrs[0].attrs[1]`` does not exist, or None."""
        tree = self.trees[module]
        if not attrs:
            return None
        if attrs[0] not in _top_names(tree):
            return f"{module} has no {attrs[0]}"
        if len(attrs) > 1:
            cls = next(
                (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == attrs[0]), None
            )
            if cls is not None and not self.has_member(cls, attrs[1]):
                return f"{attrs[0]} has no {attrs[1]}"
        return None


def _resolve_path(token: str, root: Path, package: str, code: _Code) -> str | None:
    """Why the path-like ``token`` points at nothing, or None (found, or not ours)."""
    parts = token.rstrip("/").split("/")
    pkg_dir = root / package
    if (pkg_dir / parts[0]).is_dir() or (pkg_dir / f"{parts[0]}.py").is_file():
        base, in_package = pkg_dir, True
    elif parts[0] not in ("", ".", "..") and (root / parts[0]).exists():
        base, in_package = root, False
    else:
        return None  # an API path, a chat command, another program's file...
    folder = base.joinpath(*parts[:-1])
    last = parts[-1]
    if "*" in token:
        return None if folder.is_dir() else f"no folder {folder.relative_to(root).as_posix()}"
    if (folder / last).exists():
        return None
    stem, *attrs = last.split(".")
    if attrs[:1] == ["py"]:
        attrs = attrs[1:]
    file = folder / f"{stem}.py"
    if not file.is_file() and (folder / stem / "__init__.py").is_file():
        file = folder / stem / "__init__.py"
    if not file.is_file():
        return f"no file {(folder / last).relative_to(root).as_posix()}"
    if not in_package or not attrs:
        return None
    rel = file.relative_to(root).with_suffix("").parts
    module = ".".join(rel[:-1] if rel[-1] == "__init__" else rel)
    if module not in code.trees:
        return None
    return code.attributes_problem(module, attrs)


def reference_problems(
    text: str, doc: str, root: Path, package: str, trees: Mapping[str, ast.Module]
) -> list[str]:
    """Every backticked path, module attribute or ``Class.member`` of ``text`` that is not there."""
    code = _Code(trees)
    problems: list[str] = []
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        for match in _TICKED.finditer(line):
            token = match.group(1).strip()
            why: str | None = None
            if _PATHLIKE.match(token):
                why = _resolve_path(token, root, package, code)
            elif _DOTTED.match(token):
                head, *attrs = token.split(".")
                if attrs[:1] == ["py"]:
                    attrs = attrs[1:]
                module = f"{package}.{head}"
                if module in trees and (root / package / f"{head}.py").is_file():
                    why = code.attributes_problem(module, attrs)
                elif head in code.classes and len(code.classes[head]) == 1:
                    cls = code.classes[head][0]
                    if not code.has_member(cls, attrs[0]):
                        why = f"{head} has no {attrs[0]}"
            if why:
                problems.append(f"{doc}:{number}: `{token}` points at nothing ({why})")
    return problems
