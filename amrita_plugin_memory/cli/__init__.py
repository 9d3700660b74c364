"""``ambot memory``: the implementation of the maintenance commands.

The command line itself (names, options, help) is declared in the launcher
:mod:`amrita_plugin_memory_ctl` (the ``ambot.commands`` entry point), so
``--help`` answers without loading the bot. When a command really runs, the
launcher checks for a bot project, sets ``AMBOT_COMMAND_CONTEXT=1`` (the
plugin then skips its startup check), runs ``amrita.init()`` +
``amrita.load_plugins()`` and calls the matching ``*_cmd`` function of this
package (inside the click context). The bot's startup hooks have not run (no
AmritaConfig, no scheduler): every command runs on its own loop with the
plugin's :class:`~..services.MemoryRuntime`.

Every expected failure (embedding service or Chroma unreachable, local data
dir held by a running bot, bad backup file, no TTY for a confirmation) ends
with one Chinese line on stderr and exit code 1, never a traceback.

Modules: :mod:`.plumbing` (runtime, event loop, the running bot's admin API,
progress bars), :mod:`.output` (terminal formatting of the reports),
:mod:`.maintenance` (status, reindex, migrate-keys, reset-fingerprint),
:mod:`.backups` (backup list/create/restore), :mod:`.archive` (archive
list/restore/sweep), :mod:`.users` (a user's export and forget), :mod:`.importing` (memories imported from
a file).
"""

from __future__ import annotations

from .archive import archive_cmd
from .backups import backup_create_cmd, backup_list_cmd, backup_restore_cmd
from .importing import import_cmd
from .maintenance import migrate_keys_cmd, reindex_cmd, reset_fingerprint_cmd, status_cmd
from .users import export_cmd, forget_cmd

__all__ = [
    "archive_cmd",
    "backup_create_cmd",
    "backup_list_cmd",
    "backup_restore_cmd",
    "export_cmd",
    "forget_cmd",
    "import_cmd",
    "migrate_keys_cmd",
    "reindex_cmd",
    "reset_fingerprint_cmd",
    "status_cmd",
]
