"""Tool argument parsing, schemas, and the memory operations as plain logic.

Nothing here registers anything with the framework (that is :mod:`..adapters`).
"""
