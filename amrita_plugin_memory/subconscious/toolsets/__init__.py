"""The loop's tool groups, each module one group with its schemas beside it.

Groups depend on :class:`~..context.LoopContext` and on the services handed to
their constructors, never on the runner class.
"""
