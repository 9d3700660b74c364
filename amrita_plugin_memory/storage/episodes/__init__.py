"""Conversation episodes in the SQL database (issue #48)."""
