"""Text for and from a model: prompt blocks, the group window, member labels and personas,
and the parsing of the extraction models' answers.

Everything that reaches a prompt from users or models goes through the block
renderer here; everything a model answers is untrusted and parsed here.
Plain text in, text out: nothing here imports NoneBot, Amrita or ChromaDB.
"""
