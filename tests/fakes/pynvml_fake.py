"""A stand-in for nvidia-ml-py's `pynvml` module, for machines without an NVIDIA GPU.

It follows the real module (nvidia-ml-py 13.x) where mpbench touches it: the same function
names and signatures, the same return types (str names and UUIDs, int CUDA version, a ctypes
`c_nvmlMemory_t` with .total/.free/.used, a (major, minor) tuple, an `nvmlPciInfo_t` whose
busId reads as str, [current, pending] MIG modes), the same NVML_ERROR_* codes, and an
`NVMLError` whose constructor maps a code to its generated subclass (`NVMLError(12)` is an
`NVMLError_LibraryNotFound`), built the way the real module builds them. Calls before
nvmlInit raise NVMLError_Uninitialized, as the real library does.

MIG follows nvml.h: nvmlDeviceGetMigMode raises NVMLError_NotSupported on a GPU without MIG;
nvmlDeviceGetMaxMigDeviceCount is 0 unless MIG is enabled; nvmlDeviceGetMigDeviceHandleByIndex
raises NVMLError_NotSupported when MIG is off, NVMLError_InvalidArgument past the maximum and
NVMLError_NotFound for an empty slot. A MIG handle answers name ("<GPU> MIG 3g.40gb"), UUID
("MIG-..."), its own memory and its GPU/compute instance ids. Any call on any device can be
made to fail: configure(call_errors={(0, "nvmlDeviceGetUUID"): NVML_ERROR_NO_PERMISSION,
((0, 1), "nvmlDeviceGetMemoryInfo"): ...}) where (0, 1) is MIG slot 1 of GPU 0.

Use: load a fresh copy per test, `configure(...)` it, then
`monkeypatch.setitem(sys.modules, "pynvml", fake)`. A subprocess can use it too: put a copy
named pynvml.py first on PYTHONPATH and set PYNVML_FAKE_GPUS (CATALOGUE keys, e.g.
"A100,T4,A100-MIG") and, optionally, PYNVML_FAKE_INIT_ERROR (an NVML_ERROR_* number).
"""

import hashlib
import os
import string
from ctypes import Structure, c_char, c_uint, c_ulonglong
from dataclasses import dataclass, replace

# --- return codes, as in the real module ---
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22
NVML_ERROR_INSUFFICIENT_RESOURCES = 23
NVML_ERROR_FREQ_NOT_SUPPORTED = 24
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_DEPRECATED = 26
NVML_ERROR_NOT_READY = 27
NVML_ERROR_GPU_NOT_FOUND = 28
NVML_ERROR_INVALID_STATE = 29
NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30
NVML_ERROR_UNKNOWN = 999

NVML_DEVICE_MIG_DISABLE = 0x0
NVML_DEVICE_MIG_ENABLE = 0x1
NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE = 32
NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE = 16


class NVMLError(Exception):
    _valClassMapping: dict = {}  # noqa: RUF012 - mirrors the real module
    _errcode_to_string = {  # noqa: RUF012
        NVML_ERROR_UNINITIALIZED: "Uninitialized",
        NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
        NVML_ERROR_NOT_SUPPORTED: "Not Supported",
        NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
        NVML_ERROR_ALREADY_INITIALIZED: "Already Initialized",
        NVML_ERROR_NOT_FOUND: "Not Found",
        NVML_ERROR_INSUFFICIENT_SIZE: "Insufficient Size",
        NVML_ERROR_INSUFFICIENT_POWER: "Insufficient External Power",
        NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
        NVML_ERROR_TIMEOUT: "Timeout",
        NVML_ERROR_IRQ_ISSUE: "Interrupt Request Issue",
        NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
        NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
        NVML_ERROR_CORRUPTED_INFOROM: "Corrupted infoROM",
        NVML_ERROR_GPU_IS_LOST: "GPU is lost",
        NVML_ERROR_RESET_REQUIRED: "GPU requires restart",
        NVML_ERROR_OPERATING_SYSTEM: "The operating system has blocked the request.",
        NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
        NVML_ERROR_MEMORY: "Insufficient Memory",
        NVML_ERROR_UNKNOWN: "Unknown Error",
    }

    def __new__(typ, value):
        # Maps value to the proper subclass, as the real NVMLError does.
        if typ == NVMLError:
            typ = NVMLError._valClassMapping.get(value, typ)
        obj = Exception.__new__(typ)
        obj.value = value
        return obj

    def __str__(self):
        return NVMLError._errcode_to_string.get(self.value, f"NVML Error with code {self.value}")

    def __eq__(self, other):
        return self.value == other.value


def nvmlExceptionClass(nvmlErrorCode):
    if nvmlErrorCode not in NVMLError._valClassMapping:
        raise ValueError(f"nvmlErrorCode {nvmlErrorCode} is not valid")
    return NVMLError._valClassMapping[nvmlErrorCode]


def _extractNVMLErrorsAsClasses():
    """One NVMLError subclass per NVML_ERROR_* code, named as the real module names them."""
    namespace = globals()
    for err_name in [x for x in namespace if x.startswith("NVML_ERROR_")]:
        # e.g. NVML_ERROR_ALREADY_INITIALIZED -> NVMLError_AlreadyInitialized
        words = string.capwords(err_name.replace("NVML_ERROR_", ""), "_")
        class_name = "NVMLError_" + words.replace("_", "")
        err_val = namespace[err_name]

        def gen_new(val):
            def new(typ, *args):
                return NVMLError.__new__(typ, val)

            return new

        new_error_class = type(class_name, (NVMLError,), {"__new__": gen_new(err_val)})
        new_error_class.__module__ = __name__
        namespace[class_name] = new_error_class
        NVMLError._valClassMapping[err_val] = new_error_class


_extractNVMLErrorsAsClasses()


class c_nvmlMemory_t(Structure):
    _fields_ = [("total", c_ulonglong), ("free", c_ulonglong), ("used", c_ulonglong)]


class c_nvmlMemory_v2_t(Structure):
    _fields_ = [
        ("version", c_uint),
        ("total", c_ulonglong),
        ("reserved", c_ulonglong),
        ("free", c_ulonglong),
        ("used", c_ulonglong),
    ]


# NVML_STRUCT_VERSION(Memory, 2): the struct's size with the version in the top byte. The
# real module passes `version` through to nvmlDeviceGetMemoryInfo_v2 unchecked; the library
# answers a version it does not know with NVML_ERROR_ARGUMENT_VERSION_MISMATCH.
nvmlMemory_v2 = 0x02000028


class _PrintableStructure(Structure):
    """As in the real module: char-array fields read back as str on Python 3."""

    def __getattribute__(self, name):
        res = super().__getattribute__(name)
        return res.decode() if isinstance(res, bytes) else res


class nvmlPciInfo_t(_PrintableStructure):
    _fields_ = [
        ("busIdLegacy", c_char * NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE),
        ("domain", c_uint),
        ("bus", c_uint),
        ("device", c_uint),
        ("pciDeviceId", c_uint),
        ("pciSubSystemId", c_uint),
        ("busId", c_char * NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE),
    ]


class c_nvmlDevice_t:
    """Opaque device handle (a ctypes pointer in the real module); `mig` = MIG slot."""

    def __init__(self, index: int, mig: int | None = None):
        self._index = index
        self._mig = mig


# --- the fake machine ---
MIB = 1024**2


@dataclass(frozen=True)
class FakeMig:
    """One MIG device (a GPU instance with one compute instance) in a slot of its GPU."""

    profile: str  # e.g. "3g.40gb"
    memory_total: int
    gpu_instance_id: int
    compute_instance_id: int = 0
    uuid: str = ""  # "MIG-..."; made up from the parent's when empty


@dataclass(frozen=True)
class FakeGpu:
    name: str
    compute_capability: tuple[int, int]
    memory_total: int  # bytes, as nvidia-smi reports them
    uuid: str = ""  # "GPU-..."; made up from the name and index when empty
    pci_bus_id: str = ""  # "00000000:07:00.0"; made up in index order when empty
    mig_capable: bool = False  # A100, A30, H100, H200, B200
    mig_enabled: bool = False
    max_mig_devices: int = 7
    mig_devices: tuple = ()  # per slot: FakeMig, or None for an empty slot


def _made_up_uuid(prefix: str, *seed) -> str:
    digest = hashlib.sha256(repr(seed).encode()).hexdigest()
    return f"{prefix}-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


# Names and memory as NVML reports them on the real parts.
CATALOGUE = {
    "P100": FakeGpu("Tesla P100-PCIE-16GB", (6, 0), 16280 * MIB),
    "V100": FakeGpu("Tesla V100-SXM2-16GB", (7, 0), 16160 * MIB),
    "T4": FakeGpu("Tesla T4", (7, 5), 15360 * MIB),
    "GTX1660Ti": FakeGpu("NVIDIA GeForce GTX 1660 Ti", (7, 5), 6144 * MIB),
    "A100": FakeGpu("NVIDIA A100-SXM4-80GB", (8, 0), 81920 * MIB, mig_capable=True),
    "L4": FakeGpu("NVIDIA L4", (8, 9), 23034 * MIB),
    "H100": FakeGpu("NVIDIA H100 80GB HBM3", (9, 0), 81559 * MIB, mig_capable=True),
    # A real part that no datasheet table of mpbench knows: peaks must come back None.
    "A10G": FakeGpu("NVIDIA A10G", (8, 6), 23028 * MIB),
    # An A100 in MIG mode: a 3g.40gb slice, an empty slot, a 2g.20gb slice.
    "A100-MIG": FakeGpu(
        "NVIDIA A100-SXM4-80GB",
        (8, 0),
        81920 * MIB,
        mig_capable=True,
        mig_enabled=True,
        mig_devices=(
            FakeMig("3g.40gb", 40192 * MIB, gpu_instance_id=2),
            None,
            FakeMig("2g.20gb", 19968 * MIB, gpu_instance_id=3),
        ),
    ),
}

_state = {
    "gpus": [],
    "driver_version": "550.54.15",
    "cuda_driver_version": 12040,
    "init_error": None,  # an NVML_ERROR_* code nvmlInit fails with
    "legacy_bytes": False,  # old nvidia-ml-py / pynvml returned bytes for strings
    "device_errors": {},  # index -> NVML_ERROR_* raised by nvmlDeviceGetHandleByIndex
    "call_errors": {},  # (index or (index, slot), function name) -> NVML_ERROR_*
    "refcount": 0,
    "calls": [],
}


def _complete(gpu: FakeGpu, index: int) -> FakeGpu:
    """Fill in what a real GPU always has: a UUID, a PCI bus id, UUIDs of its MIG devices."""
    uuid = gpu.uuid or _made_up_uuid("GPU", gpu.name, index)
    bus = gpu.pci_bus_id or f"00000000:{16 * (index + 1):02X}:00.0"
    migs = tuple(
        None if m is None else (m if m.uuid else replace(m, uuid=_made_up_uuid("MIG", uuid, slot)))
        for slot, m in enumerate(gpu.mig_devices)
    )
    return replace(gpu, uuid=uuid, pci_bus_id=bus, mig_devices=migs)


def configure(
    gpus=(),
    driver_version="550.54.15",
    cuda_driver_version=12040,
    init_error=None,
    legacy_bytes=False,
    device_errors=None,
    call_errors=None,
):
    """Describe the machine: GPUs (FakeGpu or CATALOGUE keys), driver, failures."""
    listed = [CATALOGUE[g] if isinstance(g, str) else g for g in gpus]
    _state.update(
        gpus=[_complete(g, i) for i, g in enumerate(listed)],
        driver_version=driver_version,
        cuda_driver_version=cuda_driver_version,
        init_error=init_error,
        legacy_bytes=legacy_bytes,
        device_errors=dict(device_errors or {}),
        call_errors=dict(call_errors or {}),
        refcount=0,
        calls=[],
    )


def gpu(index: int) -> FakeGpu:
    """The configured GPU `index`, with its UUIDs and bus id filled in."""
    return _state["gpus"][index]


def calls() -> list[str]:
    """The NVML functions called so far, in order (to check init/shutdown pairing)."""
    return list(_state["calls"])


def _called(name: str) -> None:
    _state["calls"].append(name)


def _check_initialized() -> None:
    if _state["refcount"] <= 0:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)


def _string(value: str):
    return value.encode() if _state["legacy_bytes"] else value


def _fail(name: str, handle) -> None:
    """Raise the error configured for this call on this device, if any."""
    key = handle._index if handle._mig is None else (handle._index, handle._mig)
    code = _state["call_errors"].get((key, name))
    if code is not None:
        raise NVMLError(code)


def _device(handle, name: str) -> FakeGpu:
    _check_initialized()
    if not isinstance(handle, c_nvmlDevice_t):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    _fail(name, handle)
    return _state["gpus"][handle._index]


def _mig(handle, name: str) -> FakeMig | None:
    """The MIG device a handle names, or None for a whole-GPU handle."""
    gpu = _device(handle, name)
    return None if handle._mig is None else gpu.mig_devices[handle._mig]


# --- the API ---
def nvmlErrorString(result):
    return NVMLError._errcode_to_string.get(result, "Unknown Error")


def nvmlInitWithFlags(flags):
    _called("nvmlInitWithFlags")
    if _state["init_error"] is not None:
        raise NVMLError(_state["init_error"])
    _state["refcount"] += 1


def nvmlInit():
    nvmlInitWithFlags(0)


def nvmlShutdown():
    _called("nvmlShutdown")
    _check_initialized()
    _state["refcount"] -= 1


def nvmlSystemGetDriverVersion():
    _called("nvmlSystemGetDriverVersion")
    _check_initialized()
    return _string(_state["driver_version"])


def nvmlSystemGetCudaDriverVersion():
    _called("nvmlSystemGetCudaDriverVersion")
    _check_initialized()
    return int(_state["cuda_driver_version"])


def nvmlDeviceGetCount():
    _called("nvmlDeviceGetCount")
    _check_initialized()
    return len(_state["gpus"])


def nvmlDeviceGetHandleByIndex(index):
    _called("nvmlDeviceGetHandleByIndex")
    _check_initialized()
    if not 0 <= index < len(_state["gpus"]):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    if index in _state["device_errors"]:
        raise NVMLError(_state["device_errors"][index])
    return c_nvmlDevice_t(index)


def nvmlDeviceGetName(handle):
    _called("nvmlDeviceGetName")
    gpu, mig = _device(handle, "nvmlDeviceGetName"), _mig(handle, "nvmlDeviceGetName")
    return _string(gpu.name if mig is None else f"{gpu.name} MIG {mig.profile}")


def nvmlDeviceGetCudaComputeCapability(handle):
    _called("nvmlDeviceGetCudaComputeCapability")
    major, minor = _device(handle, "nvmlDeviceGetCudaComputeCapability").compute_capability
    return (major, minor)


def nvmlDeviceGetMemoryInfo(handle, version=None):
    """As the real module: no `version`, the v1 struct, whose `used` is "Sum of Reserved and
    Allocated device memory" (NVML API reference, nvmlMemory_t); a `version`, the v2 struct
    from nvmlDeviceGetMemoryInfo_v2 (a separate entry point: call_errors can fail it alone,
    as a driver without it does), with the reserve apart. `free` is the same in both."""
    name = "nvmlDeviceGetMemoryInfo_v2" if version else "nvmlDeviceGetMemoryInfo"
    _called(name)
    gpu, mig = _device(handle, name), _mig(handle, name)
    total = gpu.memory_total if mig is None else mig.memory_total
    allocated, reserved = 384 * MIB, 128 * MIB
    free = total - allocated - reserved
    if not version:
        return c_nvmlMemory_t(total=total, free=free, used=allocated + reserved)
    if version != nvmlMemory_v2:
        raise NVMLError(NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
    return c_nvmlMemory_v2_t(
        version=version, total=total, reserved=reserved, free=free, used=allocated
    )


def nvmlDeviceGetUUID(handle):
    _called("nvmlDeviceGetUUID")
    gpu, mig = _device(handle, "nvmlDeviceGetUUID"), _mig(handle, "nvmlDeviceGetUUID")
    return _string(gpu.uuid if mig is None else mig.uuid)


def nvmlDeviceGetPciInfo(handle):
    _called("nvmlDeviceGetPciInfo")
    gpu = _device(handle, "nvmlDeviceGetPciInfo")
    domain, bus, rest = gpu.pci_bus_id.split(":")
    device = rest.split(".")[0]
    return nvmlPciInfo_t(
        busIdLegacy=gpu.pci_bus_id[-12:].encode(),
        domain=int(domain, 16),
        bus=int(bus, 16),
        device=int(device, 16),
        pciDeviceId=0x20B010DE,
        pciSubSystemId=0x134F10DE,
        busId=gpu.pci_bus_id.encode(),
    )


def nvmlDeviceGetIndex(handle):
    _called("nvmlDeviceGetIndex")
    _device(handle, "nvmlDeviceGetIndex")
    return handle._index if handle._mig is None else handle._mig


def nvmlDeviceGetHandleByUUID(uuid):
    _called("nvmlDeviceGetHandleByUUID")
    _check_initialized()
    text = uuid.decode() if isinstance(uuid, bytes) else uuid
    for index, gpu in enumerate(_state["gpus"]):
        if gpu.uuid == text:
            return c_nvmlDevice_t(index)
        for slot, mig in enumerate(gpu.mig_devices):
            if mig is not None and mig.uuid == text:
                return c_nvmlDevice_t(index, slot)
    raise NVMLError(NVML_ERROR_NOT_FOUND)


def nvmlDeviceGetMigMode(device):
    _called("nvmlDeviceGetMigMode")
    gpu = _device(device, "nvmlDeviceGetMigMode")
    if not gpu.mig_capable or device._mig is not None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    mode = NVML_DEVICE_MIG_ENABLE if gpu.mig_enabled else NVML_DEVICE_MIG_DISABLE
    return [mode, mode]


def nvmlDeviceGetMaxMigDeviceCount(device):
    _called("nvmlDeviceGetMaxMigDeviceCount")
    gpu = _device(device, "nvmlDeviceGetMaxMigDeviceCount")
    # "Returns zero if MIG is not supported or enabled."
    return gpu.max_mig_devices if gpu.mig_capable and gpu.mig_enabled else 0


def nvmlDeviceGetMigDeviceHandleByIndex(device, index):
    _called("nvmlDeviceGetMigDeviceHandleByIndex")
    gpu = _device(device, "nvmlDeviceGetMigDeviceHandleByIndex")
    if not (gpu.mig_capable and gpu.mig_enabled):
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    if not 0 <= index < gpu.max_mig_devices:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    slot = (device._index, index)
    code = _state["call_errors"].get((slot, "nvmlDeviceGetMigDeviceHandleByIndex"))
    if code is not None:
        raise NVMLError(code)
    if index >= len(gpu.mig_devices) or gpu.mig_devices[index] is None:
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    return c_nvmlDevice_t(device._index, index)


def nvmlDeviceIsMigDeviceHandle(device):
    _called("nvmlDeviceIsMigDeviceHandle")
    _device(device, "nvmlDeviceIsMigDeviceHandle")
    return c_uint(0 if device._mig is None else 1)  # the real module returns the c_uint


def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(migDevice):
    _called("nvmlDeviceGetDeviceHandleFromMigDeviceHandle")
    _device(migDevice, "nvmlDeviceGetDeviceHandleFromMigDeviceHandle")
    if migDevice._mig is None:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return c_nvmlDevice_t(migDevice._index)


def nvmlDeviceGetGpuInstanceId(device):
    _called("nvmlDeviceGetGpuInstanceId")
    mig = _mig(device, "nvmlDeviceGetGpuInstanceId")
    if mig is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return mig.gpu_instance_id


def nvmlDeviceGetComputeInstanceId(device):
    _called("nvmlDeviceGetComputeInstanceId")
    mig = _mig(device, "nvmlDeviceGetComputeInstanceId")
    if mig is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return mig.compute_instance_id


# A subprocess configures the fake through its environment.
if os.environ.get("PYNVML_FAKE_GPUS") is not None or os.environ.get("PYNVML_FAKE_INIT_ERROR"):
    _error = os.environ.get("PYNVML_FAKE_INIT_ERROR")
    configure(
        gpus=[g for g in os.environ.get("PYNVML_FAKE_GPUS", "").split(",") if g],
        init_error=int(_error) if _error else None,
    )


# --- telemetry: energy, power, utilisation, clocks, temperature (as nvidia-ml-py 13.x) ---
NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_CLOCK_VIDEO = 3


class c_nvmlUtilization_t(_PrintableStructure):
    _fields_ = [("gpu", c_uint), ("memory", c_uint)]


# What every GPU's sensors read unless configure_telemetry says otherwise.
TELEMETRY_DEFAULTS = {
    "energy_mj": 5_000_000,  # the counter's value: mJ since the (fake) driver was loaded
    "energy_step_mj": 2_500,  # how far each read advances it, so reads rise monotonically
    "power_mw": 250_000,
    "gpu_util": 87,
    "memory_util": 41,
    "sm_clock_mhz": 1410,
    "temperature_c": 61,
    # Contention (issue 22): compute processes on the GPU (the cell's own counts: 1 is alone),
    # the clock-event reasons mask, and whether the driver predates R535's *Event* name
    # (then nvmlDeviceGetCurrentClocksEventReasons raises FunctionNotFound, as the real
    # module's _nvmlGetFunctionPointer does).
    "compute_processes": 1,
    "clocks_event_reasons": 0,
    "driver_before_535": False,
}


def configure_telemetry(index=0, **values):
    """Set GPU `index`'s sensors (keys of TELEMETRY_DEFAULTS); energy_step_mj=0 freezes the
    energy counter. Errors still come from configure(call_errors=...)."""
    unknown = set(values) - set(TELEMETRY_DEFAULTS)
    if unknown:
        raise ValueError(f"unknown telemetry keys: {sorted(unknown)}")
    _sensors(index).update(values)


def _sensors(index: int) -> dict:
    table = _state.setdefault("telemetry", {})
    return table.setdefault(index, dict(TELEMETRY_DEFAULTS))


def nvmlDeviceGetTotalEnergyConsumption(handle):
    _called("nvmlDeviceGetTotalEnergyConsumption")
    gpu = _device(handle, "nvmlDeviceGetTotalEnergyConsumption")
    if gpu.compute_capability < (7, 0):  # "Supports Volta and newer fully supported devices"
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    sensors = _sensors(handle._index)
    value = sensors["energy_mj"]
    sensors["energy_mj"] = value + sensors["energy_step_mj"]
    return int(value)


def nvmlDeviceGetPowerUsage(handle):
    _called("nvmlDeviceGetPowerUsage")
    _device(handle, "nvmlDeviceGetPowerUsage")
    return int(_sensors(handle._index)["power_mw"])


def nvmlDeviceGetUtilizationRates(handle):
    _called("nvmlDeviceGetUtilizationRates")
    _device(handle, "nvmlDeviceGetUtilizationRates")
    if handle._mig is not None:  # a MIG device answers Not Supported (nvitop#5, R470)
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    sensors = _sensors(handle._index)
    return c_nvmlUtilization_t(gpu=sensors["gpu_util"], memory=sensors["memory_util"])


def nvmlDeviceGetClockInfo(handle, type):
    _called("nvmlDeviceGetClockInfo")
    _device(handle, "nvmlDeviceGetClockInfo")
    if type != NVML_CLOCK_SM:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)  # the fake knows the SM clock only
    return int(_sensors(handle._index)["sm_clock_mhz"])


def nvmlDeviceGetTemperature(handle, sensor):
    _called("nvmlDeviceGetTemperature")
    _device(handle, "nvmlDeviceGetTemperature")
    if sensor != NVML_TEMPERATURE_GPU:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return int(_sensors(handle._index)["temperature_c"])


# --- contention: other processes and clock-event reasons (as nvidia-ml-py 13.x) ---
nvmlClocksEventReasonGpuIdle = 0x0000000000000001
nvmlClocksEventReasonApplicationsClocksSetting = 0x0000000000000002
nvmlClocksEventReasonSwPowerCap = 0x0000000000000004
nvmlClocksThrottleReasonHwSlowdown = 0x0000000000000008
nvmlClocksEventReasonSwThermalSlowdown = 0x0000000000000020
nvmlClocksThrottleReasonSwPowerCap = nvmlClocksEventReasonSwPowerCap


class c_nvmlProcessInfo_v2_t(_PrintableStructure):
    _fields_ = [
        ("pid", c_uint),
        ("usedGpuMemory", c_ulonglong),
        ("gpuInstanceId", c_uint),
        ("computeInstanceId", c_uint),
    ]


c_nvmlProcessInfo_v3_t = c_nvmlProcessInfo_v2_t


def nvmlDeviceGetComputeRunningProcesses(handle):
    """A list of process infos (host PIDs: the driver ignores PID namespaces)."""
    _called("nvmlDeviceGetComputeRunningProcesses")
    _device(handle, "nvmlDeviceGetComputeRunningProcesses")
    count = int(_sensors(handle._index)["compute_processes"])
    return [
        c_nvmlProcessInfo_v3_t(
            pid=40000 + i, usedGpuMemory=256 * 2**20, gpuInstanceId=0, computeInstanceId=0
        )
        for i in range(count)
    ]


def nvmlDeviceGetCurrentClocksEventReasons(handle):
    _called("nvmlDeviceGetCurrentClocksEventReasons")
    _device(handle, "nvmlDeviceGetCurrentClocksEventReasons")
    sensors = _sensors(handle._index)
    if sensors["driver_before_535"]:
        raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)
    return int(sensors["clocks_event_reasons"])


def nvmlDeviceGetCurrentClocksThrottleReasons(handle):
    """Deprecated name of the same call (same bits), the only one before R535."""
    _called("nvmlDeviceGetCurrentClocksThrottleReasons")
    _device(handle, "nvmlDeviceGetCurrentClocksThrottleReasons")
    return int(_sensors(handle._index)["clocks_event_reasons"])
