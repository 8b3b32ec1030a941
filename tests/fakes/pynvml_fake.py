"""A stand-in for nvidia-ml-py's `pynvml` module, for machines without an NVIDIA GPU.

It follows the real module (nvidia-ml-py 13.x) where mpbench touches it: the same function
names and signatures, the same return types (str names, int CUDA version, a ctypes
`c_nvmlMemory_t` with .total/.free/.used, a (major, minor) tuple), the same NVML_ERROR_*
codes, and an `NVMLError` whose constructor maps a code to its generated subclass
(`NVMLError(12)` is an `NVMLError_LibraryNotFound`), built the way the real module builds
them. Calls before nvmlInit raise NVMLError_Uninitialized, as the real library does.

Use: load a fresh copy per test, `configure(...)` it, then
`monkeypatch.setitem(sys.modules, "pynvml", fake)`. A subprocess can use it too: put a copy
named pynvml.py first on PYTHONPATH and set PYNVML_FAKE_GPUS (e.g. "A100,T4") and,
optionally, PYNVML_FAKE_INIT_ERROR (an NVML_ERROR_* number).
"""

import os
import string
from ctypes import Structure, c_uint, c_ulonglong
from dataclasses import dataclass

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


class c_nvmlDevice_t:
    """Opaque device handle (a ctypes pointer in the real module)."""

    def __init__(self, index: int):
        self._index = index


# --- the fake machine ---
MIB = 1024**2


@dataclass(frozen=True)
class FakeGpu:
    name: str
    compute_capability: tuple[int, int]
    memory_total: int  # bytes, as nvidia-smi reports them


# Names and memory as NVML reports them on the real parts.
CATALOGUE = {
    "P100": FakeGpu("Tesla P100-PCIE-16GB", (6, 0), 16280 * MIB),
    "V100": FakeGpu("Tesla V100-SXM2-16GB", (7, 0), 16160 * MIB),
    "T4": FakeGpu("Tesla T4", (7, 5), 15360 * MIB),
    "A100": FakeGpu("NVIDIA A100-SXM4-80GB", (8, 0), 81920 * MIB),
    "L4": FakeGpu("NVIDIA L4", (8, 9), 23034 * MIB),
    "H100": FakeGpu("NVIDIA H100 80GB HBM3", (9, 0), 81559 * MIB),
    # A real part that no datasheet table of mpbench knows: peaks must come back None.
    "A10G": FakeGpu("NVIDIA A10G", (8, 6), 23028 * MIB),
}

_state = {
    "gpus": [],
    "driver_version": "550.54.15",
    "cuda_driver_version": 12040,
    "init_error": None,  # an NVML_ERROR_* code nvmlInit fails with
    "legacy_bytes": False,  # old nvidia-ml-py / pynvml returned bytes for strings
    "device_errors": {},  # index -> NVML_ERROR_* raised by nvmlDeviceGetHandleByIndex
    "refcount": 0,
    "calls": [],
}


def configure(
    gpus=(),
    driver_version="550.54.15",
    cuda_driver_version=12040,
    init_error=None,
    legacy_bytes=False,
    device_errors=None,
):
    """Describe the machine: GPUs (FakeGpu or CATALOGUE keys), driver, failures."""
    _state.update(
        gpus=[CATALOGUE[g] if isinstance(g, str) else g for g in gpus],
        driver_version=driver_version,
        cuda_driver_version=cuda_driver_version,
        init_error=init_error,
        legacy_bytes=legacy_bytes,
        device_errors=dict(device_errors or {}),
        refcount=0,
        calls=[],
    )


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


def _device(handle) -> FakeGpu:
    _check_initialized()
    if not isinstance(handle, c_nvmlDevice_t):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return _state["gpus"][handle._index]


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
    return _string(_device(handle).name)


def nvmlDeviceGetCudaComputeCapability(handle):
    _called("nvmlDeviceGetCudaComputeCapability")
    major, minor = _device(handle).compute_capability
    return (major, minor)


def nvmlDeviceGetMemoryInfo(handle, version=None):
    _called("nvmlDeviceGetMemoryInfo")
    total = _device(handle).memory_total
    used = 512 * MIB
    if not version:
        return c_nvmlMemory_t(total=total, free=total - used, used=used)
    reserved = 256 * MIB
    return c_nvmlMemory_v2_t(
        version=version, total=total, reserved=reserved, free=total - used - reserved, used=used
    )


# A subprocess configures the fake through its environment.
if os.environ.get("PYNVML_FAKE_GPUS") is not None or os.environ.get("PYNVML_FAKE_INIT_ERROR"):
    _error = os.environ.get("PYNVML_FAKE_INIT_ERROR")
    configure(
        gpus=[g for g in os.environ.get("PYNVML_FAKE_GPUS", "").split(",") if g],
        init_error=int(_error) if _error else None,
    )
