"""Everything the plugin stores: ChromaDB collections and SQLite tables.

Top level: the memory store (:mod:`.memory_store`, with write-merging in
:mod:`.merge`), partition keys (:mod:`.keys`), the L1 memo (:mod:`.memo_store`),
active memory's consent (:mod:`.consent_store`) and the ORM models
(:mod:`.models`). Feature families live in subpackages: :mod:`.chroma` (the
connection, the local server, the remap markers, paging by id),
:mod:`.partition` (reading one partition: index, search, pages, counts),
:mod:`.archive` (archive collection, removal, sweep, restore, listing),
:mod:`.groups` (group awareness' stores) and :mod:`.users` (a user's export
and forget).
"""
