"""Layer 2: ChromaDB (connection, memory store, id pager), SQLite models, memo store, keys."""
