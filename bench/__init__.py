"""Benchmarks of amrita_plugin_memory (issue 7); run them all with ``python -m bench.run``.

Not part of the pytest suite: they take minutes, measure wall-clock time on a
shared machine and compare our code with raw ChromaDB / HTTP side by side in
one run.
"""

from __future__ import annotations

import os

# numpy's BLAS threads would spin against Chroma's threads on a small machine
# and turn the 0.1 ms partition scan (item 8) into noise. Set before numpy loads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
