"""How memories are compared: the keyword channel, the combined score and age decay, repeats.

Pure functions shared by ``read_memory``, write-merging, the L3 loop's
duplicate helper and the benchmarks, so that all of them compute the same
thing. Nothing here imports NoneBot, Amrita or ChromaDB.
"""
