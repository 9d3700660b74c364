"""The embedding client, the fingerprint and everything that re-embeds.

* :mod:`.client` — the HTTP client (Ollama / OpenAI protocols); :mod:`.local_model`
  — the bundled in-process model (``EMBEDDING_PROCTOL=local``).
* :mod:`.fingerprint` — which model the stored vectors come from.
* :mod:`.maintenance` — :class:`Maintenance`, what the functions below work on.
* :mod:`.backup`, :mod:`.remap` (with :mod:`.rebuild`), :mod:`.recovery` — safe re-embedding.
* :mod:`.status`, :mod:`.startup` — ``ambot memory status`` and the start-up check.
"""

from .backup import BackupInfo, create_backup, list_backups, load_backup
from .client import EmbeddingClient
from .errors import BackupError, RemapError, RemapFailed
from .fingerprint import (
    FingerprintInfo,
    compute_fingerprint,
    current_fingerprint,
    stored_fingerprint,
)
from .maintenance import Maintenance
from .recovery import recover_interrupted_remap
from .remap import RemapReport, remap, reset_fingerprint, restore_backup
from .startup import StartupResult, run_startup_check, run_startup_check_async
from .status import StatusReport, collect_status

__all__ = [
    "BackupError",
    "BackupInfo",
    "EmbeddingClient",
    "FingerprintInfo",
    "Maintenance",
    "RemapError",
    "RemapFailed",
    "RemapReport",
    "StartupResult",
    "StatusReport",
    "collect_status",
    "compute_fingerprint",
    "create_backup",
    "current_fingerprint",
    "list_backups",
    "load_backup",
    "recover_interrupted_remap",
    "remap",
    "reset_fingerprint",
    "restore_backup",
    "run_startup_check",
    "run_startup_check_async",
    "stored_fingerprint",
]
