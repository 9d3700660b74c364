"""The shared vocabulary: configuration, errors, the memory record, interfaces, text helpers.

The bottom layer. Nothing here imports NoneBot, Amrita or ChromaDB (nor any
other module of the package), so every layer (and the tests) can use it
without a running bot.
"""
