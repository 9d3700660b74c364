"""Chat tools declared beside their logic: :func:`surface_tool` and :func:`declared_tools`.

A surface tool is an ``async def <name>(self, scope, args) -> dict`` method
marked with :func:`surface_tool`, which carries the tool's schema (and,
optionally, the switch that shows or hides it). The adapter registers every
marked method of the object it is given, so adding a tool is one method in
one module: no handler table, no schema table, no registration to keep in
step. The schema's name must be the method's name (checked when collected).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from amrita_core import FunctionDefinitionSchema

from ..storage.scope import Scope

__all__ = ["BoundTool", "SurfaceTool", "declared_tools", "surface_tool"]

Handler = Callable[[Scope, Mapping[str, Any]], Awaitable[dict[str, Any]]]
Method = TypeVar("Method", bound=Callable[..., Awaitable[dict[str, Any]]])

_MARK = "__surface_tool__"


@dataclass(frozen=True, slots=True)
class SurfaceTool:
    """What :func:`surface_tool` records on a method."""

    schema: Callable[[], FunctionDefinitionSchema]
    """Builds the schema the model sees (called at registration)."""
    enabled: Callable[[Any], bool] | None = None
    """Given the tools object: whether the tool is offered now (``None``: always).
    Amrita asks it for every request, so a switch flipped at run time takes effect."""


def surface_tool(
    schema: Callable[[], FunctionDefinitionSchema],
    *,
    enabled: Callable[[Any], bool] | None = None,
) -> Callable[[Method], Method]:
    """Mark ``async def <name>(self, scope, args) -> dict`` as the chat tool ``<name>``."""

    def mark(method: Method) -> Method:
        setattr(method, _MARK, SurfaceTool(schema, enabled))
        return method

    return mark


@dataclass(frozen=True, slots=True)
class BoundTool:
    """One declared tool of one tools object, ready to register."""

    name: str
    schema: FunctionDefinitionSchema
    handler: Handler
    owner: Any
    switch: Callable[[Any], bool] | None = None

    def enabled(self) -> bool:
        return self.switch is None or bool(self.switch(self.owner))


def declared_tools(owner: Any) -> list[BoundTool]:
    """Every tool declared on ``owner``'s class (and its bases), in definition order.

    Raises ``TypeError`` when a schema's name differs from its method's: the
    model would call a name that no handler answers.
    """
    found: dict[str, SurfaceTool] = {}
    for cls in reversed(type(owner).__mro__):
        for name, value in vars(cls).items():
            spec = getattr(value, _MARK, None)
            if isinstance(spec, SurfaceTool):
                found[name] = spec
    tools: list[BoundTool] = []
    for name, spec in found.items():
        schema = spec.schema()
        if schema.name != name:
            raise TypeError(f"surface tool {name}: its schema is named {schema.name!r}")
        tools.append(BoundTool(name, schema, getattr(owner, name), owner, spec.enabled))
    return tools
