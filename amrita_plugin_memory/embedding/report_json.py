"""The JSON form of the status report and of backups.

One shape for the admin API and the command line: ``ambot memory status``
prints this form whether it computed the report itself (bot stopped) or got
it from the running bot's admin API, so both print exactly the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .backup import BackupInfo
from .fingerprint import FingerprintInfo
from .status import RemapMarker, StatusReport

__all__ = ["backup_json", "status_json"]


def _fingerprint(info: FingerprintInfo | None) -> dict[str, Any] | None:
    if info is None:
        return None
    return {
        "fingerprint": info.fingerprint,
        "protocol": info.protocol,
        "model": info.model,
        "base_url": info.base_url,
        "text_format": info.text_format,
        "describe": info.describe(),
    }


def _marker(marker: RemapMarker | None) -> dict[str, Any] | None:
    if marker is None:
        return None
    return {
        "kind": marker.kind,
        "pid": marker.pid,
        "host": marker.host,
        "since": marker.since,
        "collections": list(marker.collections),
        "process": marker.process,
        "committed": marker.committed,
        "summary": marker.summary,
        "advice": marker.advice,
    }


def backup_json(info: BackupInfo) -> dict[str, Any]:
    return {
        "name": info.path.name,
        "path": str(info.path),
        "created_at": info.created_at,
        "size": info.size,
        "counts": dict(info.counts),
        "total": info.total,
        "fingerprint": info.fingerprint.describe() if info.fingerprint else None,
    }


def status_json(report: StatusReport, backup_dir: Path) -> dict[str, Any]:
    return {
        "vector_db": report.vector_db,
        "fingerprint": {
            "stored": _fingerprint(report.stored),
            "current": _fingerprint(report.current),
            "current_error": report.current_error,
            "config_problem": report.config_problem,
            "match": report.match,
            "state": report.state[0],
            "colour": report.state[1],
        },
        "memory_total": report.memory_total,
        "vector_pending": report.vector_pending,
        "keyword_only": report.keyword_only,
        "distribution": [
            {"partition": partition, "scope": scope, "count": n}
            for (partition, scope), n in sorted(report.distribution.items())
        ],
        "knowledge": {"name": report.knowledge_name, "count": report.knowledge_count},
        "archive_total": report.archive_count,
        "key_format": {
            "stored": report.key_format_stored,
            "current": report.key_format_current,
        },
        "pending_temps": list(report.pending_temps),
        "remap_marker": _marker(report.remap_marker),
        "backup_dir": str(backup_dir),
        "backups": [backup_json(b) for b in report.backups],
    }
