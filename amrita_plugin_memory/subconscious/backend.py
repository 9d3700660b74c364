"""The backend of one cycle: isolated tools, the chat preset, a read-only chat snapshot.

:class:`SubconsciousBackend` is handed to the cycle's ChatObject instead of
Amrita's backend, so the loop sees **only** its own tool set (never the
chat's global registry, and the chat never sees the loop's tools), runs on
the chat plugin's active preset, and reads the target user's recent private
chat as its "memory" without ever writing it back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from amrita_core import AbilityBackend, MemoryBackend, MemoryModel, ModelPreset, ToolsManager
from amrita_core.contexts import AbilityContext
from amrita_core.preset import MultiPresetManager
from amrita_core.tools.manager import MultiToolsManager
from amrita_core.tools.mcp import MultiClientManager

__all__ = ["SubconsciousBackend", "build_cycle_tools"]


def build_cycle_tools(
    isolated: MultiToolsManager,
    allowed: Iterable[str],
    *,
    warn: Callable[[str], None],
    global_tools: MultiToolsManager | None = None,
) -> MultiToolsManager:
    """The tool set of one cycle: the loop's own tools plus the allowed global ones.

    A fresh manager per cycle, so a global tool named in ``allowed_tools`` is
    picked up even when its plugin registered it after ours, and never lands
    in the loop's own manager. A name that is not registered only warns.
    """
    tools = MultiToolsManager()
    for data in isolated.get_tools().values():
        tools.register_tool(data)
    source = global_tools if global_tools is not None else ToolsManager()
    for name in allowed:
        if tools.has_tool(name):
            continue  # already one of the loop's own tools
        data = source.get_tool(name)
        if data is None:
            warn(f"[Subconscious] allowed_tools 中的工具 {name!r} 不存在（或已被禁用），已忽略")
            continue
        tools.register_tool(data)
    return tools


class SubconsciousBackend(AbilityBackend, MemoryBackend):
    """Ability + memory backend of one cycle (billing is not persisted)."""

    def __init__(self, tools: MultiToolsManager, preset: ModelPreset, history: MemoryModel) -> None:
        self.tools = tools
        self.presets = MultiPresetManager()
        self.presets.set_default_preset(preset)
        self.mcp = MultiClientManager()
        self.history = history

    async def load_ability_all(self, session_id: str) -> AbilityContext:
        return AbilityContext(tools=self.tools, presets=self.presets, mcp=self.mcp)

    async def load_mcp_clients(self, session_id: str) -> MultiClientManager:
        return self.mcp

    async def load_tools(self, session_id: str) -> MultiToolsManager:
        return self.tools

    async def load_presets(self, session_id: str) -> MultiPresetManager:
        return self.presets

    async def load_memory(self, session_id: str) -> MemoryModel:
        return self.history

    async def commit_memory(self, session_id: str, memory: MemoryModel) -> None:
        """Never write back: the snapshot is a copy of the user's chat, read only."""
