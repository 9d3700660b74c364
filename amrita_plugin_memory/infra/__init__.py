"""Process plumbing: crash-safe files, async locks, the write gate, the terminal, the bot link.

Mechanisms with no knowledge of memories: what a store, the start-up check
or ``ambot memory`` needs from the operating system and from a running bot.
Nothing here imports NoneBot, Amrita or ChromaDB.
"""
