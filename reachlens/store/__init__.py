"""Audit directories on disk: protocol header, parquet tables, resume and refusal."""

from reachlens.store.audit_dir import AuditDir, write_json, write_parquet

__all__ = ["AuditDir", "write_json", "write_parquet"]
