"""Extractive episodes, without a model (issue #48): ``extract_episode``."""

from __future__ import annotations

from typing import Any

from tests.lazy import lazy_import

X = lazy_import("amrita_plugin_memory.ranking.episode_extract")
E = lazy_import("amrita_plugin_memory.core.episodes")


def _line(user: str, text: str, at: float, *, bot: bool = False, name: str = "") -> object:
    return E.EpisodeLine("c", "private", user, text, at, name=name, is_bot=bot)


def _zh() -> list[object]:
    return [
        _line("1234", "我明天要去二面了，有点紧张", 1.0),
        _line("bot", "别紧张，二面一般问项目经历", 2.0, bot=True),
        _line("1234", "面试官是技术总监，二面会问算法吗", 3.0),
        _line("1234", "我准备了好几个项目经历，算法题刷了很多", 4.0),
    ]


def _label(line: Any) -> str:
    return "你" if line.is_bot else f"用户_{line.user_id}"


def test_chinese_conversation() -> None:
    summary, topics = X.extract_episode(_zh(), _label)
    assert topics[:2] == ("二面", "算法") and len(topics) <= 5
    assert summary.startswith("话题：二面、算法")
    assert "用户_1234：我明天要去二面了" in summary and "你：" not in summary
    assert len(summary) <= E.SUMMARY_MAX_CHARS
    assert X.extract_episode(_zh(), _label) == (summary, topics)  # deterministic


def test_english_conversation() -> None:
    lines = [
        _line("1", "I have my second interview tomorrow and I am nervous", 1.0, name="Alice"),
        _line("2", "Interviews are fun, practice algorithms", 2.0, name="Bob"),
        _line("1", "The interview is with the CTO, algorithms for sure", 3.0, name="Alice"),
    ]
    summary, topics = X.extract_episode(lines, lambda line: line.name)
    assert topics[:2] == ("interview", "algorithms") and "tomorrow" not in topics
    assert summary.startswith("Topics: interview, algorithms") and "Alice: " in summary
    assert "话题" not in summary


def test_bounded_and_no_numbers() -> None:
    long = [_line("1234", f"今天跑步跑了 {i} 公里，膝盖有点疼" * 5, float(i)) for i in range(40)]
    summary, topics = X.extract_episode(long, _label)
    assert len(summary) <= E.SUMMARY_MAX_CHARS
    assert all(not t.isdigit() for t in topics) and any("跑步" in t for t in topics)


def test_empty_and_bot_only() -> None:
    assert X.extract_episode([], _label) == ("", ())
    summary, _ = X.extract_episode([_line("bot", "你好呀，今天想聊点什么", 1.0, bot=True)], _label)
    assert summary.endswith("你：你好呀，今天想聊点什么")


def test_quoted_lines_do_not_stack_punctuation() -> None:
    """A line's own full stop before the separator would read "。；" (or ".;")."""
    lines = [
        _line("1234", "我明天要去二面了。", 1.0),
        _line("1234", "二面会问算法吗？", 2.0),
        _line("1234", "算法题刷了很多，", 3.0),
    ]
    summary, _ = X.extract_episode(lines, _label)
    assert "。；" not in summary and "，；" not in summary, summary
    assert "二面会问算法吗？" in summary  # a question keeps its mark
    english = [
        _line("1", "Interview tomorrow.", 1.0, name="A"),
        _line("1", "Nervous.", 2.0, name="A"),
    ]
    summary, _ = X.extract_episode(english, lambda line: line.name)
    assert ".;" not in summary, summary
