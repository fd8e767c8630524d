"""Audit directories on disk: protocol header, parquet tables, resume and refusal, one writer at a time."""

from reachlens.store.audit_dir import AuditDir, read_json, run_differences, write_json, write_parquet
from reachlens.store.lock import DirectoryLock, DirectoryLocked

__all__ = [
    "AuditDir", "DirectoryLock", "DirectoryLocked", "read_json", "run_differences", "write_json", "write_parquet",
]
