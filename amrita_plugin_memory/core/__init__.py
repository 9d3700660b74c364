"""Layer 1: configuration, errors, records, locks, text and file utilities.

Nothing here imports NoneBot or Amrita, so every other layer (and the tests)
can use it without a running bot.
"""
