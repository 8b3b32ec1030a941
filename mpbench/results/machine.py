"""A machine as its records know it, and its one name (asv's machine.json idea).

A record's machine is its hardware fingerprint: the device (GPU, or CPU and its 16-bit
arithmetic) and, where the site named the machine (`MPBENCH_MACHINE=NAME`, read by
mpbench/machine.py, kept in each record's config as `machine`), that name, which enters the
fingerprint too. Every command names a machine by `Machine.label()`: compare's tables, notes
and plots, history's headings and the fleet's columns (`history --by device`) alike, so a
machine a report names is the one another report names, and the fingerprint in it is what
`--device` takes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mpbench.results.schema import CellRecord

SITE_KEY = "machine"  # the record's config entry holding MPBENCH_MACHINE (runner/loop.py)
# How much of a hardware fingerprint every table shows (`[9f3c2a7b41d0]`): enough to tell a
# fleet's machines apart, and the shortest prefix --device takes for a fingerprint
# (results/store.py's StoreFilter).
SHORT_FINGERPRINT = 12


def short_fingerprint(fingerprint: str) -> str:
    return fingerprint[:SHORT_FINGERPRINT] if fingerprint else "unknown"


def device_name(record: CellRecord) -> str:
    """`cpu: AMD EPYC 9R14`: the device's kind and name, as the tables, the store's rows and
    `--device` name it."""
    return f"{record.device.kind}: {record.device.name}"


@dataclass(frozen=True)
class Machine:
    """One machine: what tells it apart (the fingerprint) and what a person reads of it."""

    fingerprint: str
    device: str  # "cuda: NVIDIA H200", device_name
    site: str | None = None  # MPBENCH_MACHINE, as the site names it; None: unnamed
    # The device's low-precision arithmetic: "CC 9.0" (a GPU's compute capability),
    # "avx512_bf16, amx_bf16" (a CPU's 16-bit flags); only a record says it (a group key does
    # not hold it), and it tells no two machines apart: the fingerprint does.
    arithmetic: str | None = field(default=None, compare=False)

    @classmethod
    def of(cls, record: CellRecord) -> Machine:
        return cls(
            record.hardware_fingerprint,
            device_name(record),
            site_name(record.config.get(SITE_KEY)),
            _arithmetic(record),
        )

    def label(self) -> str:
        """`cuda: NVIDIA H200 [6579a41894f8]`, and a named machine's name after it
        (`[6579a41894f8] [ib-cluster]`): the one name every report gives this machine."""
        named = f" [{self.site}]" if self.site else ""
        return f"{self.device} [{short_fingerprint(self.fingerprint)}]{named}"

    @property
    def device_class(self) -> str:
        """What a person calls the device: `NVIDIA H200 (CC 9.0)`, `AMD EPYC (avx512_bf16)`."""
        name = self.device.split(": ", 1)[-1]
        return f"{name} ({self.arithmetic})" if self.arithmetic else name


def site_name(value: object) -> str | None:
    """The site's name for the machine from a config's `machine` entry; None: unnamed."""
    return value if isinstance(value, str) and value else None


def _arithmetic(record: CellRecord) -> str:
    """A GPU's compute capability, or a CPU's 16-bit arithmetic (the runner records a CPU's
    precision flags as its capability); another device's kind."""
    device = record.device
    if device.kind == "cpu":
        flags = [f for f in (device.capability or "").split(",") if f]
        return ", ".join(flags) if flags else "no bf16/fp16 arithmetic"
    if device.kind == "cuda" and device.capability:
        return f"CC {device.capability}"
    return device.kind
