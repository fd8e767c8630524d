"""Runs on disk: one shape for every study (:class:`Run`: kind, record, summary, tables), one format
(``run.json`` with a format version and a status, ``summary.json``, parquet tables), written and read one way
(``run.save(DIR)``, :func:`read_run`, :func:`list_runs`), created, locked, resumed and refused in one place
(:class:`RunDir`); a run the runner writes (:class:`PartsDir`: an audit, a probe run) adds the parts it writes as
its slices finish."""

from reachlens.store.files import read_json, rerun_name, single_name, write_csv, write_json, write_parquet
from reachlens.store.kinds import RUN_KINDS, register_kind
from reachlens.store.parts_dir import PartKey, PartsDir, audit_tables, part_name
from reachlens.store.lock import DirectoryLock, DirectoryLocked, writer_alive
from reachlens.store.record import FORMAT_VERSION, STATUSES, RunRecord, recording_command, run_differences
from reachlens.store.run import RecordedProtocol, Run, RunInfo, list_runs, read_run
from reachlens.store.run_dir import RUN_FILE, RunDir, read_record

__all__ = [
    "DirectoryLock", "DirectoryLocked", "FORMAT_VERSION", "PartKey", "PartsDir", "RUN_FILE", "RUN_KINDS",
    "RecordedProtocol",
    "Run", "audit_tables", "RunDir", "RunInfo", "RunRecord", "STATUSES", "list_runs", "part_name", "read_json", "read_record", "read_run",
    "recording_command", "rerun_name", "register_kind", "run_differences", "single_name", "write_csv", "write_json",
    "write_parquet", "writer_alive",
]
