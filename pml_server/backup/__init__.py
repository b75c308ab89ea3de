"""Backups of the embedded store: each one a directory of its own under a backup root, there
complete or not at all, the newest few kept. A backup's directory is a data directory:
`pml serve --data-dir` on it (or on a copy) serves what it holds."""

from pml_server.backup._dir import (
    BACKUP_PREFIX,
    MANIFEST_NAME,
    RESTORED_NAME,
    STORE_ID_NAME,
    Backup,
    BackupDir,
    RestoreRefusedError,
    store_id,
    verify_restored,
)
from pml_server.backup._job import BackupJob, BackupStatus

__all__ = [
    "BACKUP_PREFIX",
    "MANIFEST_NAME",
    "RESTORED_NAME",
    "STORE_ID_NAME",
    "Backup",
    "BackupDir",
    "BackupJob",
    "BackupStatus",
    "RestoreRefusedError",
    "store_id",
    "verify_restored",
]
