"""Every relative link and ``#anchor`` in the user docs (README.md, docs/*.md) resolves.

The README is the entry point and docs/ holds the details, so the two are tied
together by links: a renamed heading or a moved file would leave an operator at a
dead link. Anchors are computed the way GitHub renders them (lowercase, markup and
punctuation dropped, spaces to ``-``, ``-1``/``-2`` for repeated headings). Links
and headings inside code are not links and not headings, so code is skipped.
The user docs also carry no issue references (``#23``): an operator cannot look
them up, and the figures name the command that produces them instead.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
README_MAX_LINES = 500

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_INLINE_CODE = re.compile(r"(`+)(.+?)\1")
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_ISSUE = re.compile(r"(?<![\w/&#])#\d+\b")


def user_docs(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def prose_lines(text: str) -> list[tuple[int, str]]:
    """``(line number, line)`` outside fenced code blocks."""
    lines: list[tuple[int, str]] = []
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        opened = _FENCE.match(line)
        if fence is None and opened:
            fence = opened.group(1)
        elif fence is not None:
            if line.strip().startswith(fence):
                fence = None
        else:
            lines.append((number, line))
    return lines


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading (before the ``-N`` suffix of repeats)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link shows its text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    seen: Counter[str] = Counter()
    result: set[str] = set()
    for _, line in prose_lines(text):
        match = _HEADING.match(line)
        if not match:
            continue
        slug = github_anchor(match.group(2))
        result.add(f"{slug}-{seen[slug]}" if seen[slug] else slug)
        seen[slug] += 1
    return result


def links(text: str) -> list[tuple[int, str]]:
    """``(line number, target)`` of every Markdown link and image outside code."""
    found: list[tuple[int, str]] = []
    for number, line in prose_lines(text):
        line = _INLINE_CODE.sub("", line)
        found += [(number, target) for target in _LINK.findall(line)]
    return found


def link_problems(paths: list[Path], root: Path = ROOT) -> list[str]:
    problems: list[str] = []
    anchor_cache: dict[Path, set[str]] = {}

    def anchors_of(path: Path) -> set[str]:
        if path not in anchor_cache:
            anchor_cache[path] = anchors(path.read_text(encoding="utf-8"))
        return anchor_cache[path]

    for path in paths:
        name = path.relative_to(root).as_posix()
        for number, target in links(path.read_text(encoding="utf-8")):
            if _SCHEME.match(target):
                continue  # http(s), mailto: not checked here
            file_part, _, anchor = target.partition("#")
            where = f"{name}:{number} → {target}"
            linked = (path.parent / unquote(file_part)).resolve() if file_part else path
            if not linked.is_relative_to(root):
                problems.append(f"{where}：指向仓库之外")
            elif not linked.exists():
                problems.append(f"{where}：文件不存在")
            elif anchor:
                if linked.suffix != ".md":
                    problems.append(f"{where}：锚点只能指向 Markdown 文件")
                elif unquote(anchor) not in anchors_of(linked):
                    problems.append(f"{where}：{linked.name} 中没有这个标题")
    return problems


def issue_references(paths: list[Path], root: Path = ROOT) -> list[str]:
    found: list[str] = []
    for path in paths:
        for number, line in prose_lines(path.read_text(encoding="utf-8")):
            line = _INLINE_CODE.sub("", line)
            line = _LINK.sub("", line)
            found += [
                f"{path.relative_to(root).as_posix()}:{number} {ref}"
                for ref in _ISSUE.findall(line)
            ]
    return found


def test_every_relative_link_and_anchor_resolves() -> None:
    assert link_problems(user_docs()) == []


def test_user_docs_carry_no_issue_references() -> None:
    assert issue_references(user_docs()) == []


def test_readme_stays_short() -> None:
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md 有 {lines} 行；细节放进 docs/"


def test_readme_links_every_doc() -> None:
    """Every page in docs/ is reachable from the README."""
    linked = {
        (README.parent / target.partition("#")[0]).resolve()
        for _, target in links(README.read_text(encoding="utf-8"))
        if not _SCHEME.match(target)
    }
    missing = [p.name for p in user_docs()[1:] if p.resolve() not in linked]
    assert missing == []


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        (
            "配置文件 `config/amrita_plugin_memory/config.toml`",
            "配置文件-configamrita_plugin_memoryconfigtoml",
        ),
        ("主动记忆：自动记住与自动想起", "主动记忆自动记住与自动想起"),
        ("环境变量（`.env`）", "环境变量env"),
        ("`[archive]` 归档", "archive-归档"),
        ("顶层键（L1 / L2）", "顶层键l1--l2"),
        ("用户命令 `/memory`（别名 `记忆`）", "用户命令-memory别名-记忆"),
        ("See [the docs](docs/x.md) now", "see-the-docs-now"),
    ],
)
def test_anchor_is_computed_as_github_does(heading: str, anchor: str) -> None:
    assert github_anchor(heading) == anchor


def test_the_check_catches_broken_links(tmp_path: Path) -> None:
    """Break a link in each way (file, anchor, repeated heading, code) and see it reported."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text(
        "# 甲\n\n## 重复\n\n## 重复\n\n```bash\n# 不是标题\n[x](missing.md)\n```\n"
        "[回到首页](../README.md#首页)\n",
        encoding="utf-8",
    )
    (tmp_path / "docs" / "pic.png").write_bytes(b"\x89PNG")
    good = (
        "# 首页\n\n[甲](docs/a.md#甲) [第二个](docs/a.md#重复-1) ![图](docs/pic.png)\n"
        "[外部](https://example.com/#x) `[代码](nowhere.md)` [本页](#首页)\n"
    )
    (tmp_path / "README.md").write_text(good, encoding="utf-8")
    assert link_problems(user_docs(tmp_path), tmp_path) == []

    broken = good + (
        "[缺文件](docs/b.md) [缺锚点](docs/a.md#乙) [第三个](docs/a.md#重复-2) "
        "[不是标题](docs/a.md#不是标题) [本页缺](#没有) [图锚点](docs/pic.png#x) "
        "[外面](../outside.md)\n"
    )
    (tmp_path / "README.md").write_text(broken, encoding="utf-8")
    problems = link_problems(user_docs(tmp_path), tmp_path)
    assert [p.split(" → ")[1] for p in problems] == [
        "docs/b.md：文件不存在",
        "docs/a.md#乙：a.md 中没有这个标题",
        "docs/a.md#重复-2：a.md 中没有这个标题",
        "docs/a.md#不是标题：a.md 中没有这个标题",
        "#没有：README.md 中没有这个标题",
        "docs/pic.png#x：锚点只能指向 Markdown 文件",
        "../outside.md：指向仓库之外",
    ]


def test_the_check_catches_issue_references(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text(
        "# 首页\n\n修复见 #23。`#24` 在代码里，[链接](#首页) 与 &#123; 不算。\n```\n#25\n```\n",
        encoding="utf-8",
    )
    assert issue_references(user_docs(tmp_path), tmp_path) == ["README.md:3 #23"]


_QUOTED_CJK = re.compile(r'"([^"\n]*[\u4e00-\u9fff][^"\n]*)"')


def headings(paths: list[Path]) -> set[str]:
    """The text of every heading in ``paths`` (inline-code backticks removed)."""
    found: set[str] = set()
    for path in paths:
        for _, line in prose_lines(path.read_text(encoding="utf-8")):
            match = _HEADING.match(line)
            if match:
                found.add(match.group(2).replace("`", "").strip())
    return found


def named_headings(text: str) -> list[str]:
    """The doc headings a developer text names: quoted texts in Chinese ("用户命令 `/memory`")."""
    return [m.replace("`", "").strip() for m in _QUOTED_CJK.findall(text)]


def test_architecture_names_only_headings_that_exist() -> None:
    """ARCHITECTURE.md's how-to sends a newcomer to doc sections by their heading."""
    names = named_headings((ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8"))
    assert names, "ARCHITECTURE.md names no doc heading: this check reads nothing"
    missing = sorted(set(names) - headings([*user_docs(), ROOT / "docs" / "development.md"]))
    assert missing == [], f"ARCHITECTURE.md names headings that no doc has: {missing}"


def test_named_headings_reads_quoted_chinese_only() -> None:
    text = 'a row of "全部配置键" and "English only" and docs: "用户命令 `/memory`".'
    assert named_headings(text) == ["全部配置键", "用户命令 /memory"]
    assert "全部配置键" not in headings([])
