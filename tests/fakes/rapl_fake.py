"""A fake Linux powercap tree (/sys/class/powercap) for the RAPL tests.

The real directory holds one entry per zone, sub-zones included, side by side: the control
type "intel-rapl", packages "intel-rapl:0", "intel-rapl:1", their sub-zones "intel-rapl:0:0"
(core), "intel-rapl:0:2" (dram), and on some Intel laptops "intel-rapl-mmio:0", a second view of
package-0. Each zone has `name`, `energy_uj` (µJ, wraps at `max_energy_range_uj`) and more.
Here they are plain directories and files; a test moves a counter with `set_energy`.
"""

from __future__ import annotations

from pathlib import Path

MAX_RANGE_UJ = 262_143_328_850  # a real package's max_energy_range_uj (Intel, 2^38 units)


def add_zone(root: Path, zone: str, name: str, energy_uj: int, max_range_uj: int = MAX_RANGE_UJ):
    path = root / zone
    path.mkdir(parents=True)
    (path / "name").write_text(f"{name}\n")
    (path / "energy_uj").write_text(f"{energy_uj}\n")
    (path / "max_energy_range_uj").write_text(f"{max_range_uj}\n")
    (path / "enabled").write_text("1\n")
    return path


def set_energy(root: Path, zone: str, energy_uj: int) -> None:
    (root / zone / "energy_uj").write_text(f"{energy_uj}\n")


def two_socket_machine(root: Path) -> Path:
    """Two packages, a core and a dram sub-zone of package 0, an MMIO duplicate of package 0
    and the control-type directory: only intel-rapl:0 and intel-rapl:1 are package energy."""
    (root / "intel-rapl").mkdir(parents=True)
    (root / "intel-rapl" / "enabled").write_text("1\n")
    add_zone(root, "intel-rapl:0", "package-0", 1_000_000)
    add_zone(root, "intel-rapl:0:0", "core", 400_000)
    add_zone(root, "intel-rapl:0:2", "dram", 7_000_000)
    add_zone(root, "intel-rapl:1", "package-1", 2_000_000)
    add_zone(root, "intel-rapl-mmio:0", "package-0", 9_000_000)
    return root


def live_counter(root: Path, watts: float):
    """A stand-in for mpbench.telemetry.energy._read_int under which every package's
    energy_uj runs on with the real clock, as a package drawing `watts` does (the files hold
    the value at the moment this is called); other files are read as they are."""
    import time

    start = time.monotonic()

    def read(path: Path) -> int:
        value = int(path.read_text().strip())
        if path.name == "energy_uj" and path.parent.parent == root:
            value += round(watts * (time.monotonic() - start) * 1e6)
        return value

    return read
