"""What several processes on one store share through the SQL database: the change feed, leases."""
