"""Which NVML GPU a CUDA device index means: CUDA_DEVICE_ORDER and CUDA_VISIBLE_DEVICES.

NVML numbers GPUs in PCI bus order and ignores CUDA_VISIBLE_DEVICES; CUDA numbers them
fastest-first unless CUDA_DEVICE_ORDER=PCI_BUS_ID, then keeps only (and reorders by) the
devices CUDA_VISIBLE_DEVICES lists. So "cuda:1" and NVML GPU 1 can be different boards.

mpbench runs every cell with CUDA_DEVICE_ORDER=PCI_BUS_ID unless the user chose an order, so
an unset CUDA_DEVICE_ORDER is read here as PCI bus order. CUDA_VISIBLE_DEVICES follows the
CUDA Programming Guide, "CUDA Environment Variables" (CUDA_VISIBLE_DEVICES):
- unset: every device; set but empty: none;
- a comma-separated list of integer indices (CUDA's own order) or UUID strings as
  `nvidia-smi -L` prints them ("GPU-8932f937-..."), where a prefix that names exactly one
  device is enough ("GPU-8932f937");
- "If an invalid index is encountered, only devices with indices that appear before the
  invalid index in the list are visible" (0,2,-1,1 -> devices 0 and 2);
- MIG devices as "MIG-<UUID>" (driver R470+) or "MIG-GPU-<GPU-UUID>/<GI>/<CI>" (R450/R460).
Details the guide leaves open follow torch's own reading of the variable
(torch/cuda/__init__.py: _parse_visible_devices, _transform_uuid_to_ordinals): integers are
read like strtoul ("1gpu" is 1, a leading "+"/"-" is a sign); the list's kind is set by its
first entry ("GPU-...", "MIG-..." or integers) and an entry of another kind ends it; a repeated
device makes the whole list empty; an ambiguous UUID prefix is invalid.

MIG: a CUDA process enumerates a single MIG device (NVIDIA MIG User Guide, "CUDA Device
Enumeration", for CUDA 11/R450 and CUDA 12/R525), so a list of MIG UUIDs gives one device,
the first valid one. Which slice CUDA picks without a MIG UUID, or how a MIG-mode GPU sits in
a list of integer indices, is not documented: that mapping is reported unknown.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mpbench.detect.gpu import GpuInfo

PCI_BUS_ID = "PCI_BUS_ID"


def in_pci_order(env: Mapping[str, str]) -> dict[str, str]:
    """A child process's environment with CUDA numbering GPUs as NVML does (PCI bus order),
    unless the user chose an order: the one rule every mpbench child (cells, --measure) and
    cuda_mapping's reading of an unset CUDA_DEVICE_ORDER rely on."""
    return {**env, "CUDA_DEVICE_ORDER": env.get("CUDA_DEVICE_ORDER", PCI_BUS_ID)}


@dataclass(frozen=True)
class CudaMapping:
    """The GPUs CUDA would number 0, 1, ... in an environment; `gpus` None = not knowable."""

    gpus: tuple[GpuInfo, ...] | None
    note: str | None = None  # why the mapping is unknown or narrower than it looks

    @property
    def known(self) -> bool:
        return self.gpus is not None

    def get(self, index: int) -> GpuInfo | None:
        if self.gpus is None or not 0 <= index < len(self.gpus):
            return None
        return self.gpus[index]


def _strtoul(text: str) -> int:
    """The integer a string starts with, as CUDA reads it; -1 when it starts with none."""
    digits = ""
    for position, char in enumerate(text):
        if char.isdigit() or (position == 0 and char in "+-"):
            digits += char
        else:
            break
    try:
        return int(digits)
    except ValueError:
        return -1


def _pci_order(gpus: Sequence[GpuInfo]) -> list[GpuInfo]:
    """NVML's GPUs in PCI bus order (NVML lists them so; sorted again when every bus id is
    known, because NVML's docs promise no order)."""
    if all(g.pci_bus_id for g in gpus):
        return sorted(gpus, key=lambda g: g.pci_bus_id.upper())
    return list(gpus)


def _by_uuid_prefix(candidate: str, devices: Sequence[GpuInfo]) -> GpuInfo | None:
    found = [d for d in devices if d.uuid and d.uuid.startswith(candidate)]
    return found[0] if len(found) == 1 else None  # none, or ambiguous: invalid


def _legacy_mig(candidate: str, slices: Sequence[GpuInfo]) -> GpuInfo | None:
    # MIG-GPU-<GPU-UUID>/<GPU instance ID>/<compute instance ID> (drivers R450/R460).
    parent, _, ids = candidate.removeprefix("MIG-").partition("/")
    gi, _, ci = ids.partition("/")
    if not (gi.isdigit() and ci.isdigit()):
        return None
    found = [
        s
        for s in slices
        if s.parent_uuid
        and s.parent_uuid.startswith(parent)
        and (s.gpu_instance_id, s.compute_instance_id) == (int(gi), int(ci))
    ]
    return found[0] if len(found) == 1 else None


def _selected(entries: list[str], resolve) -> list[GpuInfo] | None:
    """Resolve entries in order: stop at the first invalid one; a repeat empties the list."""
    chosen: list[GpuInfo] = []
    for entry in entries:
        device = resolve(entry)
        if device is None:
            break
        if any(device is c for c in chosen):
            return []
        chosen.append(device)
    return chosen


def _mig_mode_note(gpus: Sequence[GpuInfo]) -> str | None:
    mig = [g for g in gpus if g.mig_mode]
    if not mig:
        return None
    which = ", ".join(f"GPU {g.index}" for g in mig)
    return (
        f"{which} in MIG mode: which MIG device CUDA uses is known only when "
        "CUDA_VISIBLE_DEVICES names it (CUDA_VISIBLE_DEVICES=MIG-<uuid>, see the MIG UUIDs above)"
    )


def cuda_mapping(
    gpus: Sequence[GpuInfo], env: Mapping[str, str], unreadable: int = 0
) -> CudaMapping:
    """What CUDA device 0, 1, ... is, for a process started with `env` (see module doc).

    `unreadable`: GPUs NVML counted but could not open; CUDA may still number them, so an
    index-based mapping is unknown then."""
    order = env.get("CUDA_DEVICE_ORDER")
    visible = env.get("CUDA_VISIBLE_DEVICES")
    base = _pci_order([g for g in gpus if not g.is_mig_slice])
    slices = [s for g in base for s in g.mig_devices]

    if visible is not None and not visible.strip():
        return CudaMapping((), "CUDA_VISIBLE_DEVICES is empty: CUDA sees no GPU")
    entries = [] if visible is None else [e.strip() for e in visible.split(",")]
    by_uuid = bool(entries) and entries[0].startswith(("GPU-", "MIG-"))
    order_known = (order or PCI_BUS_ID).strip().upper() == PCI_BUS_ID
    if not order_known and not by_uuid and len(base) > 1:
        # Integer indices (or none) in an order NVML cannot reproduce (FASTEST_FIRST ranks by
        # a CUDA-internal performance estimate).
        return CudaMapping(
            None,
            f"CUDA_DEVICE_ORDER={order}: CUDA numbers GPUs in its own order, NVML in PCI bus "
            "order, so mpbench cannot tell which GPU cuda:N is (set CUDA_DEVICE_ORDER=PCI_BUS_ID)",
        )

    if by_uuid:
        kind = entries[0][:4]  # "GPU-" or "MIG-": an entry of the other kind ends the list
        ends = next((i for i, e in enumerate(entries) if not e.startswith(kind)), len(entries))
        kept = entries[:ends]

    if by_uuid and kind == "MIG-":

        def resolve_mig(entry: str) -> GpuInfo | None:
            if entry.startswith("MIG-GPU-") and "/" in entry:
                return _legacy_mig(entry, slices)
            return _by_uuid_prefix(entry, slices)

        chosen = _selected(kept, resolve_mig)
        if not chosen:
            return CudaMapping((), f"{_hides(visible)}: CUDA sees no GPU")
        if len(chosen) > 1:
            return CudaMapping(
                tuple(chosen[:1]),
                "CUDA enumerates a single MIG device per process: only the first MIG UUID in "
                "CUDA_VISIBLE_DEVICES counts",
            )
        return CudaMapping(tuple(chosen))

    if by_uuid:
        chosen = _selected(kept, lambda entry: _by_uuid_prefix(entry, base))
    elif unreadable:
        return CudaMapping(
            None,
            f"NVML could not open {unreadable} GPU(s): which GPU cuda:N is cannot be told "
            "from CUDA indices (name GPUs by UUID in CUDA_VISIBLE_DEVICES)",
        )
    elif visible is None:
        chosen = list(base)
    else:

        def resolve_index(entry: str) -> GpuInfo | None:
            number = _strtoul(entry)
            return base[number] if 0 <= number < len(base) else None

        chosen = _selected(entries, resolve_index)

    note = _mig_mode_note(chosen)
    if note:
        return CudaMapping(None, note)
    if base and not chosen:
        return CudaMapping((), f"{_hides(visible)}: CUDA sees no GPU")
    return CudaMapping(tuple(chosen))


def _hides(visible: str | None) -> str:
    return (
        f"CUDA_VISIBLE_DEVICES={visible} selects no GPU of this machine (the list ends at its "
        "first invalid entry, and a repeated one empties it)"
    )
