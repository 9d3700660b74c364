"""Terminal output of the ``ambot memory`` reports (sizes, times, tables).

The reports arrive in their JSON form (:mod:`..embedding.report_json`), the
same whether the command computed them or the running bot did, so both paths
print exactly the same text.
"""

from __future__ import annotations

import unicodedata
from typing import Any

import click

from ..core.calendar import OwnerCalendar
from ..embedding import FingerprintInfo

__all__ = [
    "counts_text",
    "fp",
    "fpj",
    "print_backups",
    "print_status",
    "print_usage",
    "size",
    "when",
]

FEATURE_NAMES = {
    "extraction": "主动记忆提取",
    "persona": "画像提取",
    "subconscious": "L3 循环",
    "episodes": "对话片段摘要",
}
BLOCK_NAMES = {
    "tools": "工具定义",
    "memo": "<MEMO>",
    "memories": "<MEMORIES>",
    "group_context": "<GROUP_CONTEXT>",
    "personas": "<PERSONAS>",
    "self": "<SELF>",
    "episodes": "<EPISODES>",
}


def size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KB", "MB", "GB"):
        value /= 1024
        if value < 1024 or unit == "GB":
            break
    return f"{value:.1f} {unit}"


def _width(text: str) -> int:
    """Display width in a terminal (CJK characters take two columns)."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _pad(text: str, width: int) -> str:
    return text + " " * max(0, width - _width(text))


def when(iso: str, calendar: OwnerCalendar) -> str:
    """``2026-12-04 07:30:00`` in the owner's zone (``[memory] timezone``), not the
    terminal's: the command prints what the console shows, wherever it runs."""
    local = calendar.local(iso)
    return local.strftime("%Y-%m-%d %H:%M:%S") if local is not None else (iso or "?")


def fp(info: FingerprintInfo | None) -> str:
    return info.describe() if info is not None else "未记录"


def fpj(info: dict[str, Any] | None) -> str:
    return str(info["describe"]) if info else "未记录"


def counts_text(counts: dict[str, Any]) -> str:
    return "，".join(f"{name} {n} 条" for name, n in counts.items())


def print_backups(backups: list[dict[str, Any]], backup_dir: Any, calendar: OwnerCalendar) -> None:
    """Backups in their JSON form (:func:`..embedding.report_json.backup_json`)."""
    click.echo(f"备份（{backup_dir}）：")
    if not backups:
        click.echo("  （无）")
        return
    for b in backups:
        counts = counts_text(b["counts"]) or "内容未知"
        click.echo(f"  {b['name']}  {when(b['created_at'], calendar)}  {counts}  {size(b['size'])}")


def print_status(report: dict[str, Any], calendar: OwnerCalendar) -> None:
    """The status report in its JSON form (:func:`..embedding.report_json.status_json`)."""
    fingerprint = report["fingerprint"]
    click.echo(f"向量库：{report['vector_db']}")
    click.echo("嵌入指纹：")
    click.echo(f"  已存储：{fpj(fingerprint['stored'])}")
    if fingerprint["current"] is None:
        click.echo(f"  当前：  无法计算（{fingerprint['current_error']}）")
    else:
        click.echo(f"  当前：  {fpj(fingerprint['current'])}")
    click.secho(f"  状态：  {fingerprint['state']}", fg=fingerprint["colour"])
    click.echo(f"记忆：共 {report['memory_total']} 条")
    if report.get("keyword_only"):
        click.echo("  检索：无嵌入模式（EMBEDDING_ENABLED=false），按关键词")
    if report.get("vector_pending"):
        click.secho(
            f"  待补嵌入：{report['vector_pending']} 条（先按关键词检索；嵌入服务可用时 Bot 自动补齐）",
            fg="yellow",
        )
    rows = report["distribution"]
    if rows:
        width = max(_width(r["partition"]) for r in rows)
        click.echo(f"  {_pad('分区', width)}  {_pad('范围', 5)}  条数")
        for r in rows:
            click.echo(f"  {_pad(r['partition'], width)}  {_pad(r['scope'], 5)}  {r['count']}")
    kb = report["knowledge"]
    knowledge = f"{kb['count']} 条" if kb["count"] is not None else "不存在"
    click.echo(f"知识库 {kb['name']}：{knowledge}")
    click.echo(f"归档：{report.get('archive_total', 0)} 条（ambot memory archive list）")
    keys = report["key_format"]
    click.echo("分区键格式：")
    click.echo(f"  已存储：{keys['stored'] or '未记录'}")
    click.echo(f"  当前：  {keys['current']}")
    if keys["stored"] == keys["current"]:
        click.echo("  状态：  一致")
    else:
        click.echo("  状态：  待迁移 —— 运行 `ambot memory migrate-keys`（Bot 启动时也会自动迁移）")
    marker = report.get("remap_marker")
    if marker:
        click.secho(marker["summary"], fg="yellow")
        for line in marker["advice"]:
            click.echo(f"  {line}")
    if report["pending_temps"]:
        click.secho(
            f"未完成的重映射：{', '.join(report['pending_temps'])}（下次启动 Bot 或运行 reindex 时自动处理）",
            fg="yellow",
        )
    print_backups(report["backups"], report["backup_dir"], calendar)
    if "usage" in report:
        print_usage(report["usage"], calendar)


def _spend(row: dict[str, Any]) -> str:
    return (
        f"请求 {row['requests']}，输入 {row['prompt_tokens']}（缓存命中 {row['cached_tokens']}），"
        f"输出 {row['completion_tokens']}"
    )


def print_usage(usage: dict[str, Any], calendar: OwnerCalendar) -> None:
    """``usage`` of the status report (:func:`..storage.usage.usage_json`)."""
    click.echo("后台请求用量（token，按供应商返回的 usage；没有 usage 时按字数估算）：")
    if usage.get("error"):
        click.secho(f"  {usage['error']}", fg="yellow")
        return
    estimated = usage.get("estimated", {})
    for feature, name in FEATURE_NAMES.items():
        for span, label in (("today", "今天"), ("last_30_days", "近 30 天")):
            row = usage[span][feature]
            guessed = estimated.get(span, {}).get(feature, 0)
            note = f"（其中 {guessed} 次为估算）" if guessed else ""
            click.echo(f"  {_pad(name, 12)} {_pad(label, 8)} {_spend(row)}{note}")
    budget = usage.get("budget") or {}
    if budget:
        per_day = budget["background_tokens_per_day"] or "不限"
        per_user = budget["background_tokens_per_user_per_day"] or "不限"
        click.echo(
            f"后台预算：全局每天 {per_day}（今天已用 {budget['used_today']}），每人每天 {per_user}"
        )
        if budget["reached"]:
            click.secho(
                f"  今天已达全局上限：后台请求等到 {when(budget['resets_at'], calendar)} 再继续",
                fg="yellow",
            )
        for user in budget["users_reached"]:
            click.secho(
                f"  用户 {user['user_id']} 今天已用 {user['tokens']}，达到每人上限：该用户的后台请求"
                f"等到 {when(budget['resets_at'], calendar)} 再继续",
                fg="yellow",
            )
    blocks = (usage.get("blocks") or {}).get("last_30_days")
    if blocks and blocks["turns"]:
        parts = [
            f"{BLOCK_NAMES[name]} {blocks[name]['chars_per_turn']}"
            for name in BLOCK_NAMES
            if blocks[name]["turns"]
        ]
        click.echo(
            f"每轮对话注入（近 30 天 {blocks['turns']} 轮的平均字符数）："
            + ("，".join(parts) or "无")
        )
