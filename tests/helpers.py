"""One helper per concept, shared by the test modules."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

from tests.servers import ChatServer

__all__ = ["chat_requests", "partition", "runtime", "runtime_with", "system_prompt"]


def runtime() -> Any:
    """The plugin's :class:`MemoryRuntime` of the test session (loaded by conftest)."""
    import amrita_plugin_memory

    assert amrita_plugin_memory.runtime is not None
    return amrita_plugin_memory.runtime


def runtime_with(tmp_path: Path, *, own_data_dir: bool = False, **subconscious: Any) -> Any:
    """A copy of the session runtime with another ``[subconscious]`` section and config dir.

    ``own_data_dir`` also moves the data dir (profile, knowledge files) under ``tmp_path``.
    """
    rt = runtime()
    file = rt.config.file.model_copy(
        update={"subconscious": rt.config.file.subconscious.model_copy(update=subconscious)}
    )
    dirs: dict[str, Path] = {"config_dir": tmp_path / "config"}
    if own_data_dir:
        dirs["data_dir"] = tmp_path / "data"
    clone = copy.copy(rt)
    clone.config = dataclasses.replace(rt.config, file=file, **dirs)
    return clone


def partition(uid: int) -> str:
    """The personal partition key of QQ user ``uid`` (Amrita's current format)."""
    return f"QQPlatform_Private_{uid}"


def system_prompt(request: dict[str, Any]) -> str:
    """The system message of one model request."""
    first = request["messages"][0]
    assert first["role"] == "system"
    return first["content"] if isinstance(first["content"], str) else json.dumps(first["content"])


def chat_requests(server: ChatServer) -> list[dict[str, Any]]:
    """Requests of the answering chat model (not the content check, not the L3 loop)."""
    out = []
    for request in server.requests:
        names = [t["function"]["name"] for t in request.get("tools") or []]
        if names == ["report"] or any(n.startswith("subconscious_") for n in names):
            continue
        out.append(request)
    return out
