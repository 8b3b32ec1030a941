"""A real one-node Slurm on this machine for the fleet's tests: munged, slurmctld and slurmd
(Debian's `slurm-wlm` and `munge`), each with its files in one folder and its own ports, two
partitions (gpu-a, gpu-b) on the node `localhost`. Needs root (slurmd runs jobs as their
user) and the packages; `start` returns None where either is missing."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
PARTITIONS = ("gpu-a", "gpu-b")


@dataclass
class Slurm:
    folder: Path
    env: dict[str, str]  # SLURM_CONF: what sinfo, sbatch and submitit read

    def stop(self) -> None:
        subprocess.run(["scancel", "--full", "--user", "root"], env={**os.environ, **self.env},
                       capture_output=True, timeout=30)  # fmt: skip
        for name in ("slurmd", "slurmctld", "munged"):
            pid_file = self.folder / f"{name}.pid"
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pid_file.read_text().split()[0]), signal.SIGTERM)
        time.sleep(1)


def available() -> str | None:
    """Why a real Slurm cannot start here, or None."""
    missing = [d for d in DAEMONS if shutil.which(d) is None]
    if missing:
        return f"{', '.join(missing)} not installed (Debian: slurm-wlm munge)"
    if os.geteuid() != 0:
        return "slurmd needs root"
    return None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start(folder: Path) -> Slurm:
    for sub in ("spool", "state", "log", "munge"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    key = folder / "munge" / "key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    socket_path = folder / "munge" / "socket"
    ctld, slurmd = free_port(), free_port()
    partitions = "".join(
        f"PartitionName={p} Nodes=localhost MaxTime=INFINITE State=UP OverSubscribe=FORCE:2"
        f"{' Default=YES' if n == 0 else ''}\n"
        for n, p in enumerate(PARTITIONS)
    )
    conf = folder / "slurm.conf"
    conf.write_text(
        f"""ClusterName=mpbench-test
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={socket_path}
CredType=cred/munge
SlurmctldPort={ctld}
SlurmdPort={slurmd}
StateSaveLocation={folder / "state"}
SlurmdSpoolDir={folder / "spool"}
SlurmctldPidFile={folder / "slurmctld.pid"}
SlurmdPidFile={folder / "slurmd.pid"}
SlurmctldLogFile={folder / "log" / "slurmctld.log"}
SlurmdLogFile={folder / "log" / "slurmd.log"}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=localhost CPUs={os.cpu_count()} State=UNKNOWN
{partitions}"""
    )
    env = {"SLURM_CONF": str(conf)}
    full = {**os.environ, **env}
    subprocess.run(
        ["munged", "--force", f"--key-file={key}", f"--socket={socket_path}",
         f"--pid-file={folder / 'munged.pid'}", f"--log-file={folder / 'munge' / 'log'}",
         f"--seed-file={folder / 'munge' / 'seed'}"],
        check=True, env=full, timeout=30,
    )  # fmt: skip
    subprocess.run(["slurmctld", "-f", str(conf)], check=True, env=full, timeout=30)
    subprocess.run(["slurmd", "-f", str(conf)], check=True, env=full, timeout=30)
    slurm = Slurm(folder, env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        listed = subprocess.run(["sinfo", "--noheader", "--format=%R %t"], env=full,
                                capture_output=True, text=True, timeout=30)  # fmt: skip
        states = dict(line.split() for line in listed.stdout.splitlines() if line.strip())
        if all(states.get(p, "").rstrip("*") == "idle" for p in PARTITIONS):
            return slurm
        time.sleep(0.5)
    slurm.stop()
    raise RuntimeError(f"the one-node Slurm did not come up: {listed.stdout} {listed.stderr}")
