"""ChromaDB itself: the process-wide connection, the local ``chroma run`` child,
the "remap in progress" markers writers obey, and reading a collection page by page."""
