"""Result records and files: the contract between `mpbench run` and `mpbench compare`."""

from mpbench.results.frame import load
from mpbench.results.io import read_records
from mpbench.results.schema import (
    SCHEMA_VERSION,
    AccuracyStats,
    BottleneckStats,
    CellRecord,
    CompileStats,
    ContentionStats,
    DataInfo,
    DeviceInfo,
    DistributedStats,
    DivergenceInfo,
    EndToEndStats,
    EnergyStats,
    Fp8Stats,
    LossScaleStats,
    MemoryStats,
    SchemaError,
    StartupStats,
    Status,
    StepTimeStats,
    StopStats,
    TelemetryStats,
)
from mpbench.results.store import load_store
from mpbench.results.versions import load_record
from mpbench.results.writer import append_record, write_csv, write_environment

__all__ = [
    "SCHEMA_VERSION",
    "AccuracyStats",
    "BottleneckStats",
    "CellRecord",
    "CompileStats",
    "ContentionStats",
    "DataInfo",
    "DeviceInfo",
    "DistributedStats",
    "DivergenceInfo",
    "EndToEndStats",
    "EnergyStats",
    "Fp8Stats",
    "LossScaleStats",
    "MemoryStats",
    "SchemaError",
    "StartupStats",
    "Status",
    "StepTimeStats",
    "StopStats",
    "TelemetryStats",
    "append_record",
    "load",
    "load_record",
    "load_store",
    "read_records",
    "write_csv",
    "write_environment",
]
