"""One user as a whole: the export and forget (:mod:`.user_data`), what a forget removes and
keeps (:mod:`.forget_counts`) and the real deletion behind a forget (:mod:`.erase`)."""
