"""Everything about one user as a whole: the export and forget (:mod:`.user_data`), the
real deletion behind a forget, the tombstones of forgotten users, and what the L3
loop's state keeps about a user."""
