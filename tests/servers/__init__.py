"""Local test-bed servers: fake embedding/chat HTTP APIs and a real Chroma subprocess."""

from .chat_server import ChatServer, Reply, ToolCall
from .chroma_proxy import ChromaProxy
from .chroma_server import ChromaEndpoint, ChromaServer, free_port
from .embedding_server import EmbeddingServer, embed_text

__all__ = [
    "ChatServer",
    "ChromaEndpoint",
    "ChromaProxy",
    "ChromaServer",
    "EmbeddingServer",
    "Reply",
    "ToolCall",
    "embed_text",
    "free_port",
]
