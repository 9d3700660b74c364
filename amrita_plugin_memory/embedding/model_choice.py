"""Which listed model ``EMBEDDING_MODEL_NAME=auto`` stands for (no I/O).

The client fetches the service's model list; what the list says and which
entry is the embedding model is decided here, apart from the HTTP plumbing,
so the rule can be read and tested on its own.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from nonebot.log import logger

from ..core.errors import EmbeddingConfigError

__all__ = ["ListedModel", "choose_embedding_model", "listed_models", "looks_like_embedding_model"]

ListedModel = tuple[str, list[str]]
"""``(name, families)`` of one listed model (families: Ollama's ``details`` only)."""

# Model families that are embedding models even without "embed" in the name
# (multilingual-e5-*, bge-m3, gte-*, all-minilm, nomic-*), as whole name parts.
_EMBEDDING_FAMILIES = re.compile(r"(?<![a-z0-9])(e5|bge|gte|minilm|nomic)(?![a-z])")


def looks_like_embedding_model(name: str, families: Sequence[str] = ()) -> bool:
    """Whether a listed model is (very probably) an embedding model.

    ``families`` are Ollama's ``details.family``/``families`` (BERT-based
    models are embedding models there).
    """
    lower = name.lower()
    if "embed" in lower or _EMBEDDING_FAMILIES.search(lower):
        return True
    return any("bert" in f.lower() for f in families)


def listed_models(protocol: str, body: Any) -> list[ListedModel]:
    """The models of a list answer: OpenAI's ``GET /models`` or Ollama's ``GET /api/tags``."""
    if protocol == "openai":
        items = body.get("data") if isinstance(body, dict) else None
        return [(str(m["id"]), []) for m in items or [] if isinstance(m, dict) and "id" in m]
    entries: list[ListedModel] = []
    for m in (body.get("models") if isinstance(body, dict) else None) or []:
        if not isinstance(m, dict) or not (m.get("name") or m.get("model")):
            continue
        details = m.get("details")
        if not isinstance(details, dict):
            details = {}
        families = [str(details.get("family", ""))] + [
            str(f) for f in details.get("families") or []
        ]
        entries.append((str(m.get("name") or m.get("model")), families))
    return entries


def choose_embedding_model(entries: Sequence[ListedModel]) -> str:
    """The model ``auto`` stands for: the only one listed, else the first embedding model."""
    names = [name for name, _ in entries]
    if len(entries) == 1:
        logger.info(f"[Memory] EMBEDDING_MODEL_NAME=auto：嵌入服务只列出一个模型，使用 {names[0]}")
        return names[0]
    candidates = [name for name, fam in entries if looks_like_embedding_model(name, fam)]
    if not candidates:
        listed = "、".join(names[:10]) + ("…" if len(names) > 10 else "") if names else "无"
        raise EmbeddingConfigError(
            f"EMBEDDING_MODEL_NAME=auto，但无法从嵌入服务列出的模型（{listed}）中认出嵌入模型。"
            "这是配置问题：请在 .env 中把 EMBEDDING_MODEL_NAME 设为要使用的嵌入模型名"
        )
    chosen = candidates[0]
    others = f"；其他候选：{'、'.join(candidates[1:])}" if len(candidates) > 1 else ""
    logger.info(
        f"[Memory] EMBEDDING_MODEL_NAME=auto：从 {len(names)} 个模型中选用嵌入模型 {chosen}"
        f"{others}（要用其他模型请设置 EMBEDDING_MODEL_NAME）"
    )
    return chosen
