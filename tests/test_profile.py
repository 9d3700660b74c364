"""User profile: summary---body file, line window reads, line edits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.lazy import lazy_import

P = lazy_import("amrita_plugin_memory.subconscious.profile_store")


@pytest.fixture
def profile(tmp_path: Path) -> Any:
    return P.ProfileStore(tmp_path)


async def test_empty_profile(profile: Any) -> None:
    assert await profile.read() == {
        "section": "body",
        "total_lines": 0,
        "start_line": 1,
        "lines": [],
    }
    assert not profile.path.exists()


async def test_insert_replace_delete_and_window(profile: Any) -> None:
    assert (await profile.update("insert", start_line=1, content="喜欢猫\n住在上海\n程序员"))[
        "total_lines"
    ] == 3
    await profile.update("insert", section="summary", start_line=1, content="一位住在上海的程序员")
    await profile.update("replace", start_line=2, content="住在杭州")
    await profile.update("insert", start_line=4, content="会弹吉他")  # append
    await profile.update("delete", start_line=1, end_line=1)
    body = await profile.read()
    assert body["lines"] == ["1: 住在杭州", "2: 程序员", "3: 会弹吉他"]
    window = await profile.read(start_line=2, end_line=2)
    assert window["lines"] == ["2: 程序员"] and window["total_lines"] == 3
    assert (await profile.read("summary"))["lines"] == ["1: 一位住在上海的程序员"]
    text = profile.path.read_text(encoding="utf-8")
    assert text == "一位住在上海的程序员\n---\n住在杭州\n程序员\n会弹吉他\n"


async def test_separator_in_content_cannot_corrupt(profile: Any) -> None:
    await profile.update("insert", section="summary", start_line=1, content="摘要\n---\n\\---")
    await profile.update("insert", start_line=1, content="---\n正文")
    summary = await profile.read("summary")
    body = await profile.read()
    assert summary["lines"] == ["1: 摘要", "2: ---", "3: \\---"]
    assert body["lines"] == ["1: ---", "2: 正文"]
    assert profile.path.read_text(encoding="utf-8").splitlines().count("---") == 1


@pytest.mark.parametrize(
    ("op", "kwargs", "message"),
    [
        ("rewrite", {}, "replace, insert, delete"),
        ("replace", {"start_line": 5, "content": "x"}, "超出范围"),
        ("delete", {"start_line": 2, "end_line": 1}, "≥ start_line"),
        ("delete", {"start_line": 0}, "≥ 1"),
        ("insert", {"start_line": 9, "content": "x"}, "超出范围"),
        ("insert", {"start_line": 1, "content": 3}, "必须是字符串"),
        ("insert", {"start_line": "1", "content": "x"}, "必须是整数"),
        ("insert", {"section": "head", "content": "x"}, "summary, body"),
        ("insert", {"start_line": 1, "content": "长" * 501}, "单行"),
    ],
)
async def test_bad_edits_change_nothing(
    profile: Any, op: str, kwargs: dict[str, Any], message: str
) -> None:
    await profile.update("insert", start_line=1, content="第一行\n第二行")
    before = profile.path.read_text(encoding="utf-8")
    with pytest.raises(P.ProfileError, match=message):
        await profile.update(op, **kwargs)
    assert profile.path.read_text(encoding="utf-8") == before


async def test_file_without_separator_is_all_body(profile: Any) -> None:
    profile.path.write_text("手写的画像\n第二行\n", encoding="utf-8")
    assert (await profile.read())["total_lines"] == 2
    assert (await profile.read("summary"))["total_lines"] == 0
