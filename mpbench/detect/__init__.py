"""`mpbench detect`: what this machine can do, and what each precision policy does on it.

Fast by design: no framework and no pandas is imported unless `probe=True`, and then only in
child processes. Two environment variables let tests describe another machine:
MPBENCH_CPUINFO (a /proc/cpuinfo text to read instead) and MPBENCH_DEV_ROOT (a directory
standing in for /dev when looking for TPU and NVIDIA device files).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from mpbench import __version__
from mpbench.detect.cpu import read_cpu
from mpbench.detect.devices import build_devices
from mpbench.detect.frameworks import (
    DEFAULT_PROBE_TIMEOUT_S,
    installed_frameworks,
    mismatch_notes,
    probe_frameworks,
)
from mpbench.detect.gpu import nvidia_device_files, probe_nvidia
from mpbench.detect.report import CUDA_ENVIRONMENT, DetectReport, DeviceEntry, HostInfo
from mpbench.detect.steps import rate_from_cache
from mpbench.detect.tpu import probe_tpu

__all__ = ["DetectReport", "DeviceEntry", "collect"]


def collect(
    probe: bool = False,
    *,
    cpuinfo_path: str | os.PathLike[str] | None = None,
    dev_root: str | os.PathLike[str] | None = None,
    sys_root: str | os.PathLike[str] = "/sys",
    environ: Mapping[str, str] | None = None,
    probe_timeout: float = DEFAULT_PROBE_TIMEOUT_S,
    tuning: bool = False,
) -> DetectReport:
    """Probe the machine. `probe=True` also imports each installed framework in a child;
    `tuning=True` also reads the machine's tuning state (mpbench.detect.system: 0.5 s, most
    of it a reading of how busy the machine is)."""
    env = os.environ if environ is None else environ
    dev = dev_root or env.get("MPBENCH_DEV_ROOT") or "/dev"
    cpu = read_cpu(cpuinfo_path or env.get("MPBENCH_CPUINFO") or None)
    nvidia = probe_nvidia()
    device_files = nvidia_device_files(dev)
    tpu = probe_tpu(dev, sys_root, env)
    frameworks = installed_frameworks()
    if probe:
        frameworks = probe_frameworks(frameworks, probe_timeout)

    notes = [*nvidia.notes, *tpu.notes]
    if device_files and not nvidia.gpus:
        shown = ", ".join(device_files[:4]) + (", ..." if len(device_files) > 4 else "")
        notes.append(
            f"{len(device_files)} NVIDIA GPU device file(s) exist ({shown}) but NVML listed no "
            "GPU: GPUs may be present but could not be read, so `--device auto` falls back to "
            "the CPU. Check that nvidia-ml-py is installed and libnvidia-ml.so.1 is visible (in "
            "a container: start it with the NVIDIA Container Toolkit, e.g. docker run --gpus all)"
        )
    if cpu.source == "platform":
        notes.append(
            "no /proc/cpuinfo: CPU flags unknown, so bf16 and fp16 on the CPU are rated slow"
        )
    cuda_environment = {k: env[k] for k in CUDA_ENVIRONMENT if k in env}
    report = DetectReport(
        mpbench_version=__version__,
        host=HostInfo.current(),
        cpu=cpu,
        gpus=nvidia.gpus,
        nvidia_driver=nvidia.driver,
        tpu=tpu.tpu,
        frameworks=frameworks,
        devices=rate_from_cache(build_devices(cpu, nvidia.gpus, tpu.tpu, frameworks), frameworks),
        notes=notes,
        probed=probe,
        nvidia_device_files=list(device_files),
        nvml_unreadable=nvidia.unreadable,
        cuda_environment=cuda_environment,
    )
    if tuning:
        from mpbench.detect.system import read_tuning

        report.tuning = read_tuning()
    mapping = report.cuda_mapping()
    if nvidia.gpus and mapping.note:
        notes.append(mapping.note)
    notes += mismatch_notes(nvidia.gpus, frameworks, mapping, cuda_environment)
    if any(d.kind == "cuda" and d.source == "torch probe" for d in report.devices):
        notes.append("NVML listed no GPU but torch sees CUDA devices: listed from the torch probe")
    return report
