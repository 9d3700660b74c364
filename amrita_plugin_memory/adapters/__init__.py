"""Everything that touches the framework (NoneBot, Amrita, amrita-core hooks).

Thin glue: events become each request's :class:`~..storage.scope.Scope`
(:mod:`.events`), tools and hooks are registered, replies are sent. The logic
they call lives in the lower layers and is testable without a bot.
"""
