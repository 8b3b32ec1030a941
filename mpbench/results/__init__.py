"""Result records and files: the contract between `mpbench run` and `mpbench compare`."""

from mpbench.results.io import append_record, read_records, write_csv, write_environment
from mpbench.results.schema import (
    SCHEMA_VERSION,
    AccuracyStats,
    CellRecord,
    DataInfo,
    DeviceInfo,
    EndToEndStats,
    LossScaleStats,
    MemoryStats,
    SchemaError,
    Status,
    StepTimeStats,
)

__all__ = [
    "SCHEMA_VERSION",
    "AccuracyStats",
    "CellRecord",
    "DataInfo",
    "DeviceInfo",
    "EndToEndStats",
    "LossScaleStats",
    "MemoryStats",
    "SchemaError",
    "Status",
    "StepTimeStats",
    "append_record",
    "read_records",
    "write_csv",
    "write_environment",
]
