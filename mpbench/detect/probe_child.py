"""Run in a child process by `mpbench detect --probe`: import one framework, report as JSON.

A child, because importing TensorFlow or a CUDA torch takes seconds, may print pages of
logs, can crash on a broken CUDA install, and grabs process-global state; the parent stays
fast and safe. Usage: `python -m mpbench.detect.probe_child torch|tensorflow`. The last
stdout line is `MPBENCH_PROBE <json>`; the JSON always has "ok", and "error" when not ok.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from mpbench.detect.child import PROBE_MARKER, answer


def probe_torch() -> dict[str, Any]:
    import torch

    cuda_available = bool(torch.cuda.is_available())
    devices = []
    bf16_supported = None
    if cuda_available:
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            devices.append(
                {
                    "index": index,
                    "name": torch.cuda.get_device_name(index),
                    "compute_capability": list(torch.cuda.get_device_capability(index)),
                    "memory_total_bytes": int(props.total_memory),
                    "arch": getattr(props, "gcnArchName", None),  # ROCm only, e.g. gfx90a
                }
            )
        try:
            bf16_supported = bool(torch.cuda.is_bf16_supported(including_emulation=False))
        except TypeError:  # torch < 2.3 has no including_emulation (and no emulation)
            bf16_supported = bool(torch.cuda.is_bf16_supported())
    mps = getattr(torch.backends, "mps", None)
    return {
        "ok": True,
        "version": torch.__version__,
        "cuda_available": cuda_available,
        "cuda_version": torch.version.cuda,
        "hip_version": getattr(torch.version, "hip", None),
        "mps_built": bool(mps.is_built()) if mps else False,
        "mps_available": bool(mps.is_available()) if mps else False,
        "bf16_supported": bf16_supported,
        "devices": devices,
    }


def probe_tensorflow() -> dict[str, Any]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    devices = []
    for index, device in enumerate(tf.config.list_physical_devices("GPU")):
        details = tf.config.experimental.get_device_details(device)
        capability = details.get("compute_capability")
        devices.append(
            {
                "index": index,
                "name": details.get("device_name", device.name),
                "compute_capability": list(capability) if capability else None,
                "memory_total_bytes": None,
                "arch": None,
            }
        )
    build = dict(tf.sysconfig.get_build_info())
    return {
        "ok": True,
        "version": tf.__version__,
        "built_with_cuda": bool(tf.test.is_built_with_cuda()),
        "built_with_rocm": bool(build.get("is_rocm_build", False)),
        "cuda_version": build.get("cuda_version"),
        "devices": devices,
    }


PROBES = {"torch": probe_torch, "tensorflow": probe_tensorflow}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in PROBES:
        print(
            f"usage: python -m mpbench.detect.probe_child {{{'|'.join(PROBES)}}}", file=sys.stderr
        )
        return 2
    return answer(PROBE_MARKER, PROBES[argv[0]])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
