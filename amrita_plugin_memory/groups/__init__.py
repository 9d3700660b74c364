"""Group awareness (the Openmim layers): group windows, member personas, the bot's self memory.

Between the services and the adapters: it uses the stores of
:mod:`..storage` and the pure logic of :mod:`..core`, and makes the one
model call of these layers (persona extraction). The NoneBot / amrita-core
hooks that feed it are :mod:`..adapters.group_hooks`.
"""
