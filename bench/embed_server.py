"""Run the test-bed embedding server (``tests.servers.EmbeddingServer``) as a process.

A real embedding service is another process: running the fake one in a thread
of the benchmark process would make it compete for the benchmark's GIL and
distort both the baselines and the event-loop lag. The parent reads the base
URL from the first line of stdout and stops the server by closing stdin.
"""

from __future__ import annotations

import sys

from tests.servers import EmbeddingServer


def main() -> None:
    server = EmbeddingServer()
    server.start()
    print(server.url, flush=True)
    try:
        sys.stdin.read()  # returns when the parent closes the pipe (or dies)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
