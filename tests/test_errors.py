"""One error root with a kind, one table of words (``core/errors.py``).

Every exception class of the package is a ``PluginError``; ``WORDS`` covers every kind;
a failure says the same thing to the chat tool, the admin console and ``ambot memory``
(``tools/args.guard_tool_call``, ``console/errors.guarded``, ``cli/plumbing.run``), in the
words the users saw before the table existed.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import Any

import click
import pytest

from tests.lazy import lazy_import

E = lazy_import("amrita_plugin_memory.core.errors")

PACKAGE = Path(__file__).resolve().parents[1] / "amrita_plugin_memory"


def _exception_classes() -> list[tuple[str, str]]:
    """``(module, class)`` of every class of the package that derives from an exception."""
    found: list[tuple[str, str]] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = "amrita_plugin_memory." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        module = module.removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and any(
                isinstance(b, ast.Name)
                and (b.id.endswith(("Error", "Exception")) or b.id in _ROOTS)
                for b in node.bases
            ):
                found.append((module, node.name))
    return found


_ROOTS = {"PluginError", "VectorStoreError", "EmbeddingError", "RemapError", "RuntimeError"}


def test_every_exception_of_the_package_has_the_root_and_a_kind() -> None:
    classes = _exception_classes()
    assert len(classes) >= 30, classes
    for module, name in classes:
        cls = getattr(importlib.import_module(module), name)
        if not issubclass(cls, BaseException):
            continue
        assert issubclass(cls, E.PluginError), f"{module}.{name} has no PluginError root"
        kind = getattr(cls, "kind", None)
        assert kind in E.WORDS, f"{module}.{name}: kind {kind!r} has no words"


def test_the_table_covers_every_kind() -> None:
    assert set(E.WORDS) == set(E.ErrorKind)


def _samples() -> list[tuple[BaseException, str, int]]:
    """One error of each kind users meet, with the words and status they got before."""
    from amrita_plugin_memory.tools.args import ToolArgError
    from amrita_plugin_memory.upkeep.archive.restore import ArchiveRestoreError
    from amrita_plugin_memory.upkeep.archive.sweep import SweepBusy
    from amrita_plugin_memory.upkeep.users.user_data import ForgetBlocked

    return [
        (ToolArgError("缺少参数 content"), "缺少参数 content", 400),
        (
            E.ScopeRefused("删除群共享记忆需要群管理员、群主或超级用户权限"),
            "删除群共享记忆需要群管理员、群主或超级用户权限",
            403,
        ),
        (E.MemoryLimitReached(3, 3), "该分区的记忆已达上限（3/3 条），请先合并或删除旧记忆", 400),
        (E.MaintenanceInProgress(), "记忆库维护中，请稍后再试（本次操作未执行）", 409),
        (E.EmbeddingUnavailable("连接被拒绝"), "嵌入服务不可用，本次操作未执行：连接被拒绝", 503),
        (
            E.EmbeddingConfigError("列表里有两个模型"),
            "嵌入模型配置有误（请管理员检查 EMBEDDING_MODEL_NAME），本次操作未执行：列表里有两个模型",
            503,
        ),
        (
            E.DimensionMismatch("384 ≠ 768"),
            "嵌入服务返回的向量与记忆库不匹配，本次操作未执行：384 ≠ 768",
            503,
        ),
        (E.VectorStoreError("连接超时"), "向量数据库不可用，本次操作未执行：连接超时", 503),
        (
            PermissionError(13, "Permission denied"),
            "文件读写失败，本次操作未执行：PermissionError",
            503,
        ),
        # Said as they are (not "向量数据库不可用"): their kind is not the store's.
        (ArchiveRestoreError("归档中没有 id 为 x 的记忆"), "归档中没有 id 为 x 的记忆", 404),
        (
            SweepBusy("另一个进程正在执行归档清理，本次跳过"),
            "另一个进程正在执行归档清理，本次跳过",
            409,
        ),
        (ForgetBlocked("仍有任务在运行"), "仍有任务在运行", 409),
    ]


async def test_the_tool_and_the_console_say_the_same() -> None:
    from amrita_plugin_memory.console.errors import ConsoleError, guarded
    from amrita_plugin_memory.tools.args import guard_tool_call

    for exc, words, status in _samples():

        async def fail(exc: BaseException = exc) -> Any:
            raise exc

        assert await guard_tool_call("[Memory]", "t", fail) == {"ok": False, "error": words}
        with pytest.raises(ConsoleError) as raised:
            await guarded("t", fail)
        assert (raised.value.status, raised.value.message) == (status, words)


def test_the_cli_says_the_error_itself(capsys: pytest.CaptureFixture[str]) -> None:
    """``ambot memory`` prints the error's own text after ``错误：`` (the operator's words)."""
    from amrita_plugin_memory.cli.plumbing import run

    class Runtime:  # what `run` needs of the runtime: leaving the command's loop
        async def leave_loop(self) -> None:
            pass

    for exc, _, _ in _samples():

        async def fail(exc: BaseException = exc) -> Any:
            raise exc

        capsys.readouterr()
        with pytest.raises(click.exceptions.Exit):
            run(Runtime(), fail)  # type: ignore[arg-type]
        assert capsys.readouterr().err.strip() == f"错误：{exc}", type(exc)


async def test_fenced_and_unexpected_errors_propagate() -> None:
    from amrita_plugin_memory.console.errors import guarded
    from amrita_plugin_memory.tools.args import guard_tool_call

    for exc in (E.WriteFenced("10001", "已遗忘"), KeyError("bug")):

        async def fail(exc: BaseException = exc) -> Any:
            raise exc

        with pytest.raises(type(exc)):
            await guard_tool_call("[Memory]", "t", fail)
        with pytest.raises(type(exc)):
            await guarded("t", fail)
