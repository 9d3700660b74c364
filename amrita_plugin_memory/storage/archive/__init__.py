"""The archive: its collection, moving memories into it (deletes, the lifetime sweep),
restoring them, and the text that lists them."""
