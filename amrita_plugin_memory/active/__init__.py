"""Active memory: the bot learns (batched extraction by the chat model) and recalls
(``<MEMORIES>``) without the chat model calling a tool."""

from .batches import BatchKey, BatchQueue, Turn
from .extraction import EXTRACTION_MARKER, ExtractionOutcome, MemoryExtractor, build_messages
from .recall import MemoryRecall
from .service import ActiveMemory

__all__ = [
    "EXTRACTION_MARKER",
    "ActiveMemory",
    "BatchKey",
    "BatchQueue",
    "ExtractionOutcome",
    "MemoryExtractor",
    "MemoryRecall",
    "Turn",
    "build_messages",
]
