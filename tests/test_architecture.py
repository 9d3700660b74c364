"""The layer rules of ARCHITECTURE.md hold, the document matches the code, and the checker
enforcing both really checks.

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
    assert arch.check(root, package=FAKE, doc=None) == []


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
    problems = arch.check(root, package=FAKE, doc=None)
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
    problems = arch.check(root, package=FAKE, doc=None)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{FAKE}/tools/memory_tools.py:2: layer violation:")
    assert "(tools)" in problems[0] and "(adapters)" in problems[0]


def test_detects_framework_import_in_core(tmp_path: Path) -> None:
    root = _make_package(tmp_path, {"core/log.py": "import pydantic\nfrom nonebot import logger\n"})
    problems = arch.check(root, package=FAKE, doc=None)
    assert problems == [
        f"{FAKE}/core/log.py:2: core module {FAKE}.core.log imports framework package nonebot"
    ]


def test_detects_package_importing_the_launcher(tmp_path: Path) -> None:
    root = _make_package(
        tmp_path,
        {"cli/plumbing.py": "def run():\n    from amrita_plugin_memory_ctl import fail\n"},
    )
    problems = arch.check(root, package=FAKE, doc=None)
    assert problems == [
        f"{FAKE}/cli/plumbing.py:2: {FAKE}.cli.plumbing imports the launcher amrita_plugin_memory_ctl"
    ]


@pytest.mark.parametrize(("lines", "too_long"), [(500, False), (501, True)])
def test_detects_overlong_module(tmp_path: Path, lines: int, too_long: bool) -> None:
    root = _make_package(tmp_path, {"core/big.py": "x = 1\n" * lines})
    problems = arch.check(root, package=FAKE, doc=None)
    if too_long:
        assert problems == [f"{FAKE}/core/big.py: module too long: 501 lines (limit 500)"]
    else:
        assert problems == []


def test_detects_private_storage_module_imported_from_outside(tmp_path: Path) -> None:
    """Partition ranking is private to storage: the layers above (upkeep included) use
    what ``memory_store`` offers; storage's own modules may import it."""
    root = _make_package(
        tmp_path,
        {
            "storage/partition/retrieval.py": "def search():\n    pass\n",
            "storage/memory_store.py": "from .partition.retrieval import search\n",
            "upkeep/listing.py": "from ..storage.memory_store import search\n",
            "active/recall.py": (
                "def run():\n    from ..storage.partition.retrieval import search\n"
            ),
            "upkeep/sweep.py": "from ..storage.partition import retrieval\n",
        },
    )
    problems = arch.check(root, package=FAKE, doc=None)
    assert problems == [
        f"{FAKE}/active/recall.py:2: private module: {FAKE}.active.recall (active) imports "
        f"{FAKE}.storage.partition.retrieval, private to storage (use what storage's door "
        "re-exports)",
        f"{FAKE}/upkeep/sweep.py:1: private module: {FAKE}.upkeep.sweep (upkeep) imports "
        f"{FAKE}.storage.partition, private to storage (use what storage's door re-exports)",
        f"{FAKE}/upkeep/sweep.py:1: private module: {FAKE}.upkeep.sweep (upkeep) imports "
        f"{FAKE}.storage.partition.retrieval, private to storage (use what storage's door "
        "re-exports)",
    ]


def test_detects_arrow_back_up_to_the_store(tmp_path: Path) -> None:
    """Within storage every import points down: nothing there imports ``memory_store``."""
    root = _make_package(
        tmp_path,
        {
            "storage/merge.py": "MERGE = 1\n",
            "storage/memory_store.py": "from .merge import MERGE\n\nclass MemoryStore:\n    pass\n",
            "storage/keys.py": (
                "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
                "    from .memory_store import MemoryStore\n"
            ),
            "upkeep/rekey.py": "from ..storage.memory_store import MemoryStore\n",
        },
    )
    problems = arch.check(root, package=FAKE, doc=None)
    assert problems == [
        f"{FAKE}/storage/keys.py:4: arrow back up: {FAKE}.storage.keys imports "
        f"{FAKE}.storage.memory_store, the top of storage (what is built on it belongs in "
        "a layer above)"
    ]


# -- ARCHITECTURE.md against the code ---------------------------------------------------

SMALL_LAYERS = (
    ("core", ("core",), frozenset()),
    ("storage", ("storage",), frozenset({"core"})),
    ("services", ("services",), frozenset({"storage", "core"})),
    ("plugin", ("",), frozenset({"services", "storage", "core"})),
)

TABLE = """# Architecture

| layer | holds | modules | may import |
| --- | --- | --- | --- |
| `core/` | vocabulary | errors (the errors, `Boom`), text | nothing |
| `storage/` | stores | store; `chroma/`: connection (a note, with commas) | core |
| `services.py` | the runtime, free text | `Runtime` | storage, core |
| `__init__.py` | entry | | anything |

See `storage/store.Store.save` and `services.Runtime`.
"""

SMALL_PACKAGE = {
    "core/errors.py": "class Boom(Exception):\n    pass\n",
    "core/text.py": "",
    "storage/store.py": (
        "class Store:\n    def __init__(self):\n        self.saved = 0\n\n"
        "    def save(self):\n        pass\n"
    ),
    "storage/chroma/connection.py": "",
    "services.py": "from .storage.store import Store\n\nclass Runtime:\n    store: Store\n",
}


def _doc_check(tmp_path: Path, table: str, **changes: str) -> list[str]:
    root = _make_package(tmp_path, {**SMALL_PACKAGE, **changes})
    (root / "ARCHITECTURE.md").write_text(table, encoding="utf-8")
    return arch.check(root, package=FAKE, layers=SMALL_LAYERS)


def test_table_matching_the_code_passes(tmp_path: Path) -> None:
    assert _doc_check(tmp_path, TABLE) == []


def test_module_missing_from_the_table_fails(tmp_path: Path) -> None:
    problems = _doc_check(tmp_path, TABLE, **{"storage/chroma/paging.py": ""})
    assert problems == [
        f"{FAKE}/storage/chroma/paging.py: module {FAKE}.storage.chroma.paging is missing "
        "from the layer table of ARCHITECTURE.md (row storage/)"
    ]


def test_table_naming_a_module_that_is_gone_fails(tmp_path: Path) -> None:
    table = TABLE.replace("errors (the errors, `Boom`), text", "errors, text, console")
    assert _doc_check(tmp_path, table) == [
        "ARCHITECTURE.md:5: layer core lists console, no module of it"
    ]


def test_may_import_cell_must_equal_the_checker(tmp_path: Path) -> None:
    table = TABLE.replace("| store; `chroma/`", "| store; `chroma/`").replace(
        "with commas) | core |", "with commas) | core, services |"
    )
    problems = _doc_check(tmp_path, table)
    assert problems == [
        "ARCHITECTURE.md:6: layer storage may import core (LAYERS), the table says core, services"
    ]


def test_layer_without_a_row_fails(tmp_path: Path) -> None:
    table = "\n".join(line for line in TABLE.splitlines() if not line.startswith("| `core/`"))
    assert "ARCHITECTURE.md: layer core has no row in the layer table" in _doc_check(
        tmp_path, table
    )


def test_stale_references_fail(tmp_path: Path) -> None:
    table = TABLE + (
        "Also `storage/store.Store.load`, `storage/gone.py`, `Store.saved`, `Store.nope`, "
        "`services.Missing`, `/api/memory/x` and `core/errors.py`.\n"
    )
    assert _doc_check(tmp_path, table) == [
        "ARCHITECTURE.md:11: `storage/store.Store.load` points at nothing (Store has no load)",
        f"ARCHITECTURE.md:11: `storage/gone.py` points at nothing (no file {FAKE}/storage/gone.py)",
        "ARCHITECTURE.md:11: `Store.nope` points at nothing (Store has no nope)",
        f"ARCHITECTURE.md:11: `services.Missing` points at nothing ({FAKE}.services has no Missing)",
    ]


def test_repository_table_misses_a_module_when_its_row_drops_it(tmp_path: Path) -> None:
    """The issue's example: a module of the package (embedding/local_model.py) not in the table."""
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    doc = tmp_path / "ARCHITECTURE.md"
    doc.write_text(text.replace("local_model (`EMBEDDING_PROCTOL=local`), ", ""), encoding="utf-8")
    problems = arch.check(ROOT, doc=str(doc))
    assert problems == [
        "amrita_plugin_memory/embedding/local_model.py: module "
        "amrita_plugin_memory.embedding.local_model is missing from the layer table of "
        f"{doc} (row embedding/)"
    ]


# -- operator doors stay off the chat path (issue #49) --------------------------------------

# The issue's probe: a `/memory` command reading everyone's data from `tools/`.
PROBE = """\
from ..storage.memory_store import MemoryStore
from ..storage.scope import operator_view


async def probe(store: MemoryStore, other: str) -> str:
    counted = await store.count_all()
    deleted = await store.archive.list_all(limit=5)
    theirs = await store.count(operator_view(other))
    return f"{counted} {theirs} {[row.record.content for row in deleted]}"
"""


def test_the_issues_probe_in_tools_fails_the_real_check(tmp_path: Path) -> None:
    """The repository's own package with the probe dropped into ``tools/``."""
    import shutil

    shutil.copytree(
        ROOT / arch.PACKAGE, tmp_path / arch.PACKAGE, ignore=shutil.ignore_patterns("__pycache__")
    )
    (tmp_path / arch.PACKAGE / "tools" / "probe.py").write_text(PROBE, encoding="utf-8")
    problems = arch.check(tmp_path, doc=None)
    probe = f"{arch.PACKAGE}/tools/probe.py"
    why = "(a read of everyone; read one user's data through a storage.scope.View)"
    assert problems == [
        f"{probe}:{line}: operator door on the chat path: {arch.PACKAGE}.tools.probe {how} {why}"
        for line, how in (
            (2, "imports operator_view"),
            (6, "uses .count_all"),
            (7, "uses .list_all"),
            (8, "uses operator_view"),
        )
    ]


# A group turn reading another group's window and another member's persona by id.
GROUP_PROBE = """\
from ..storage.groups.stores import GroupStores


async def probe(stores: GroupStores, other_group: str, other_user: str) -> str:
    window = await stores.windows.recent_any(other_group, 10)
    persona = await stores.personas.of_user_anywhere(other_user)
    return f"{[e.text for e in window]} {persona.fields}"
"""


def test_a_group_probe_in_groups_fails_the_real_check(tmp_path: Path) -> None:
    """The repository's own package with a group-store probe dropped into ``groups/``."""
    import shutil

    shutil.copytree(
        ROOT / arch.PACKAGE, tmp_path / arch.PACKAGE, ignore=shutil.ignore_patterns("__pycache__")
    )
    (tmp_path / arch.PACKAGE / "groups" / "probe.py").write_text(GROUP_PROBE, encoding="utf-8")
    problems = arch.check(tmp_path, doc=None)
    probe = f"{arch.PACKAGE}/groups/probe.py"
    why = "(a read of everyone; read one user's data through a storage.scope.View)"
    assert problems == [
        f"{probe}:{line}: operator door on the chat path: {arch.PACKAGE}.groups.probe {how} {why}"
        for line, how in ((5, "uses .recent_any"), (6, "uses .of_user_anywhere"))
    ]


# A turn reading the usage ledger of everyone, or another user's rows by their id.
USAGE_PROBE = """\
from ..storage.scope import operator_user_view
from ..storage.usage import UsageLedger


async def probe(ledger: UsageLedger, day: str, other_user: str) -> str:
    everyone = await ledger.spent_by_all(day)
    days = await ledger.totals_by_day(7)
    theirs = await ledger.of_user(operator_user_view(other_user))
    return f"{everyone} {sorted(days)} {len(theirs)}"
"""


def test_a_usage_probe_in_active_fails_the_real_check(tmp_path: Path) -> None:
    """The repository's own package with a usage-ledger probe dropped into ``active/``."""
    import shutil

    shutil.copytree(
        ROOT / arch.PACKAGE, tmp_path / arch.PACKAGE, ignore=shutil.ignore_patterns("__pycache__")
    )
    (tmp_path / arch.PACKAGE / "active" / "probe.py").write_text(USAGE_PROBE, encoding="utf-8")
    problems = arch.check(tmp_path, doc=None)
    probe = f"{arch.PACKAGE}/active/probe.py"
    why = "(a read of everyone; read one user's data through a storage.scope.View)"
    assert problems == [
        f"{probe}:{line}: operator door on the chat path: {arch.PACKAGE}.active.probe {how} {why}"
        for line, how in (
            (1, "imports operator_user_view"),
            (6, "uses .spent_by_all"),
            (7, "uses .totals_by_day"),
            (8, "uses operator_user_view"),
        )
    ]


@pytest.mark.parametrize(
    ("where", "call"),
    [
        ("tools/probe.py", "store.count_all()"),
        ("tools/probe.py", "store.iter_all_records()"),
        ("tools/probe.py", "store.scan_all(offset=0, limit=10)"),
        ("tools/probe.py", "store.fetch_anywhere(['id'])"),
        ("tools/probe.py", "store.archive.list_all()"),
        ("tools/probe.py", "store.archive.count_all()"),
        ("active/probe.py", "scope.Scope.of_operator('p')"),
        ("groups/probe.py", "scope.operator_view('p')"),
        ("prompting/probe.py", "store.count_all()"),
        ("subconscious/toolsets/probe.py", "store.count_all()"),
        ("adapters/matchers.py", "store.count_all()"),
        # The group stores (issue #49 item 1): any group's window, any user's persona.
        ("groups/probe.py", "stores.windows.recent_any('20001', 10)"),
        ("tools/probe.py", "stores.personas.of_user_anywhere('10002')"),
        ("adapters/group_hooks.py", "stores.personas.of_users_anywhere(['10002'])"),
        # The usage ledger (issue #49 item 1): every user's spend, any user's view by id.
        ("tools/probe.py", "store.usage.spent_by_all('2026-01-01')"),
        ("prompting/probe.py", "store.usage.totals_by_day(7)"),
        ("subconscious/toolsets/probe.py", "scope.operator_user_view('10002')"),
    ],
)
def test_a_door_on_the_chat_path_fails(tmp_path: Path, where: str, call: str) -> None:
    root = _make_package(tmp_path, {where: f"def probe(store, scope):\n    return {call}\n"})
    (problem,) = arch.check(root, package=FAKE, doc=None)
    assert "operator door on the chat path" in problem and problem.startswith(f"{FAKE}/{where}:2:")


def test_doors_are_fine_where_operators_are(tmp_path: Path) -> None:
    body = "def probe(store):\n    return store.count_all(), store.archive.list_all()\n"
    files = {f"{rel}.py": body for rel in ("console/probe", "cli/probe", "upkeep/probe")}
    files["adapters/console_http.py"] = body  # operator glue inside adapters/
    files["subconscious/runner.py"] = body  # the loop's own bookkeeping, not its toolsets
    root = _make_package(tmp_path, files)
    assert arch.check(root, package=FAKE, doc=None) == []


def test_an_operator_module_imported_on_the_chat_path_fails(tmp_path: Path) -> None:
    root = _make_package(
        tmp_path,
        {
            "upkeep/listing.py": "PAGE = 1\n",
            "tools/probe.py": "from ..upkeep.listing import PAGE\n",
        },
    )
    (problem,) = arch.check(root, package=FAKE, doc=None)
    assert "operator module on the chat path" in problem and "upkeep.listing" in problem


def test_the_allow_list_names_a_module_and_its_doors(tmp_path: Path) -> None:
    root = _make_package(
        tmp_path, {"tools/admin.py": "def probe(store):\n    return store.count_all()\n"}
    )
    allowed = {"tools.admin": frozenset({"count_all"})}
    assert arch.check(root, package=FAKE, doc=None, doors={"allowed": allowed}) == []
    other = {"tools.admin": frozenset({"scan_all"})}
    assert len(arch.check(root, package=FAKE, doc=None, doors={"allowed": other})) == 1


# -- the /memory commands' one facade (issue #49 item 3) -----------------------------------

# A command reaching a memo and the archive around tools/chat_stores.ChatStores.
COMMAND_PROBE = """\
from ..storage.memo_store import MemoService
from ..storage.scope import Scope


async def probe(memo: MemoService, tools: object, scope: Scope) -> str:
    text = await tools.memo.get(scope.view("user"))
    count = await tools.store.archive.count(scope.view("user"))
    return f"{text} {count}"
"""


def test_a_command_around_its_facade_fails_the_real_check(tmp_path: Path) -> None:
    """The repository's own package with the probe dropped into ``tools/`` as a command
    module; the same code outside ``tools/*commands*.py`` is not a command."""
    import shutil

    shutil.copytree(
        ROOT / arch.PACKAGE, tmp_path / arch.PACKAGE, ignore=shutil.ignore_patterns("__pycache__")
    )
    tools = tmp_path / arch.PACKAGE / "tools"
    (tools / "stats_commands.py").write_text(COMMAND_PROBE, encoding="utf-8")
    problems = arch.check(tmp_path, doc=None)
    probe = f"{arch.PACKAGE}/tools/stats_commands.py"
    why = "(use the turn's tools/chat_stores.ChatStores)"
    assert problems == [
        f"{probe}:{line}: a command reaches a store around its facade: "
        f"{arch.PACKAGE}.tools.stats_commands {how} {why}"
        for line, how in (
            (1, "imports MemoService"),
            (5, "uses MemoService"),
            (6, "uses .memo"),
            (7, "uses .archive"),
        )
    ]
    (tools / "stats_commands.py").rename(tools / "stats.py")
    assert arch.check(tmp_path, doc=None) == []


@pytest.mark.parametrize(
    ("where", "body", "bad"),
    [
        ("tools/commands.py", "def probe(tools):\n    return tools.store.archive\n", True),
        ("tools/group_commands.py", "def probe(tools):\n    return tools.memo\n", True),
        ("tools/x_commands.py", "def probe():\n    return ArchiveStore\n", True),
        ("tools/chat_stores.py", "def probe(tools):\n    return tools.store.archive\n", False),
        ("tools/memory_tools.py", "def probe(tools):\n    return tools.memo\n", False),
        ("console/commands.py", "def probe(tools):\n    return tools.memo\n", False),
    ],
)
def test_only_command_modules_are_held_to_the_facade(
    tmp_path: Path, where: str, body: str, bad: bool
) -> None:
    root = _make_package(tmp_path, {where: body})
    problems = arch.check(root, package=FAKE, doc=None)
    assert [p for p in problems if "around its facade" in p] == problems
    assert bool(problems) == bad
