"""Everything the plugin stores: ChromaDB collections and SQLite tables.

Top level: the memory store (:mod:`.memory_store`, the only door into memories from
outside ``storage/``; its collection handle in :mod:`.memory_collection`, write-merging
in :mod:`.merge`), partition keys (:mod:`.keys`), the L1 memo (:mod:`.memo_store`),
active memory's consent (:mod:`.consent_store`) and the ORM models (:mod:`.models`).
Feature families live in subpackages: :mod:`.chroma` (the connection, the local
server, the remap markers, paging by id), :mod:`.partition` (reading one partition:
index, search, recent ids, counts), :mod:`.archive` (the archive collection and
moving memories into it), :mod:`.groups` (group awareness' stores), :mod:`.users`
(tombstones, fences and what the L3 loop keeps about a user) and :mod:`.usage` (the
usage ledger and the ``[budget]`` caps). What is built on the
store (sweep, restore, export, forget, listings) lives in ``upkeep/``, above.
"""
