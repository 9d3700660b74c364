"""Reading one partition: the in-process vector index and its rows, ``read_memory``'s
ranking, newest-first pages and ids, memory counts, and stored vectors."""
