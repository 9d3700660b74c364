"""The stores of group awareness: windows, member labels and settings, personas, the
bot's self memory, and :class:`~.stores.GroupStores` that builds them together."""
