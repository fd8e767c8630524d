"""Run directories on disk: one format for every study (``run.json``, ``summary.json``, typed parquet
tables), created, reopened, locked, resumed and refused in one place (:class:`RunDir`); an audit's
directory (:class:`AuditDir`) adds the parts it writes as questions finish."""

from reachlens.store.audit_dir import AuditDir
from reachlens.store.lock import DirectoryLock, DirectoryLocked
from reachlens.store.run_dir import (
    KINDS,
    RUN_FILE,
    RunDir,
    RunRecord,
    read_json,
    read_run,
    recording_command,
    run_differences,
    write_json,
    write_parquet,
)

__all__ = [
    "AuditDir", "DirectoryLock", "DirectoryLocked", "KINDS", "RUN_FILE", "RunDir", "RunRecord", "read_json",
    "read_run", "recording_command", "run_differences", "write_json", "write_parquet",
]
