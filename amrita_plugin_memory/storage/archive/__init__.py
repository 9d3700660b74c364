"""The archive: its collection and moving memories into it (deletes; the sweep and
restores, built on the store, live in ``upkeep/archive/``)."""
