"""Runs on disk: one shape for every study (:class:`Run`: kind, record, summary, tables), one format
(``run.json`` with a format version and a status, ``summary.json``, parquet tables), written and read one way
(``run.save(DIR)``, :func:`read_run`, :func:`list_runs`), created, locked, resumed and refused in one place
(:class:`RunDir`); an audit's directory (:class:`AuditDir`) adds the parts it writes as questions finish."""

from reachlens.store.audit_dir import AuditDir
from reachlens.store.files import read_json, single_name, write_csv, write_json, write_parquet
from reachlens.store.kinds import RUN_KINDS, register_kind
from reachlens.store.lock import DirectoryLock, DirectoryLocked, writer_alive
from reachlens.store.record import FORMAT_VERSION, STATUSES, RunRecord, recording_command, run_differences
from reachlens.store.run import RecordedProtocol, Run, RunInfo, list_runs, read_run
from reachlens.store.run_dir import RUN_FILE, RunDir, read_record

__all__ = [
    "AuditDir", "DirectoryLock", "DirectoryLocked", "FORMAT_VERSION", "RUN_FILE", "RUN_KINDS", "RecordedProtocol",
    "Run", "RunDir", "RunInfo", "RunRecord", "STATUSES", "list_runs", "read_json", "read_record", "read_run",
    "recording_command", "register_kind", "run_differences", "single_name", "write_csv", "write_json",
    "write_parquet", "writer_alive",
]
