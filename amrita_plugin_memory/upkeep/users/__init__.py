"""One user as a whole: the export and forget (:mod:`.user_data`) and the real deletion
behind a forget (:mod:`.erase`)."""
