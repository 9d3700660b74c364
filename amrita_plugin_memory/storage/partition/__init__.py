"""Reading one partition: the in-process vector index and its rows, ``read_memory``'s
ranking, recent ids and memory counts (private to ``storage/``: used through
``MemoryStore``)."""
