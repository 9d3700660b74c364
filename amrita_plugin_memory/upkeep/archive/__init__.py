"""The archive at work: the lifetime sweep, restoring rows, and the text that lists them."""
