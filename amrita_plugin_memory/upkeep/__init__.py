"""Upkeep: the work done on stored memories as a whole, built on the stores' doors.

Everything here uses ``storage/`` only through :class:`~..storage.memory_store.MemoryStore`
(and the other stores), never its private parts: the archive sweep, restore and
listings (:mod:`.archive`), a user's export and forget (:mod:`.users`), the admin
console's partition pages (:mod:`.listing`), the L3 loop's stored-vector reads
(:mod:`.stored_vectors`) and the key migration (:mod:`.rekey`).
"""
