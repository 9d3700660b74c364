"""About one user, below the store: the tombstones of forgotten users, the fences of
background work, and what the L3 loop's state keeps about a user (the export and
forget live in ``upkeep/users/``)."""
