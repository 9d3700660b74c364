"""The admin console's operations (WebUI page, admin API, ``ambot memory`` while the bot runs).

Layer between :mod:`..subconscious` and :mod:`..adapters`: the operations the
admin API offers, as plain async methods that take already-received request
values (strings, JSON bodies), validate them like tool arguments and raise
:class:`.errors.ConsoleError` (an HTTP status and a Chinese message) for
everything that is not done. The FastAPI routes in
:mod:`..adapters.console_http` only translate between HTTP and these methods.
"""
