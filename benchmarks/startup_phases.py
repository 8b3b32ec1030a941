"""Where a torch cell's start-up goes, phase by phase, in a new interpreter and in a fork.

A new interpreter pays every phase; a cell forked from mpbench's torch fork server
(mpbench/runner/launchers/zygote.py) pays only those after the imports. This script is one
new interpreter: it times its own imports, then forks children that do what a forked cell
does first (create the device's context, run a first matmul), then does the same itself.

  interpreter     `python -c pass`, a separate process, timed from outside
  import torch    `import torch`
  import dynamo   `import torch._dynamo` (a cell's first optimizer step imports it)
  import backend  `import mpbench.backends.torch.backend`
  device init     the device's context and a first tensor on it (CUDA: torch.cuda.init()
                  and torch.zeros(1, device=...); CPU: a first tensor)
  first matmul    a 1024 x 1024 float32 matmul, synchronised (loads the BLAS library's kernels)

The forks are made before this process touches CUDA, as the fork server makes them; each
reports its phases, its `torch.cuda._is_in_bad_fork()` flag and its allocator's peak at
start (0: its own context). Printed as a table, and as JSON with --json.

    python benchmarks/startup_phases.py [--device cpu|cuda|cuda:N] [--forks 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

started = time.monotonic()
import torch  # noqa: E402  (timed: the first phase)

imported_torch = time.monotonic()
import torch._dynamo  # noqa: E402

imported_dynamo = time.monotonic()
import mpbench.backends.torch.backend  # noqa: E402, F401

imported_backend = time.monotonic()
PHASES = (
    "interpreter",
    "import torch",
    "import dynamo",
    "import backend",
    "device init",
    "first matmul",
)


def device_phases(device: str) -> dict[str, float | bool | int | None]:
    """Time the context and the first matmul on `device` in this process."""
    began = time.monotonic()
    target = torch.device(device)
    peak_at_start = None
    if target.type == "cuda":
        torch.cuda.init()
        # Before this process allocates anything: 0 in a fresh context of its own.
        peak_at_start = torch.cuda.max_memory_allocated(target)
    first = torch.zeros(1, device=target)
    if target.type == "cuda":
        torch.cuda.synchronize(target)
    initialised = time.monotonic()
    a = torch.randn(1024, 1024, device=target)
    (a @ a).sum().item()
    done = time.monotonic()
    del first
    return {
        "device init": initialised - began,
        "first matmul": done - initialised,
        "bad fork": torch.cuda._is_in_bad_fork(),
        "peak bytes at start": peak_at_start,
    }


def in_fork(device: str) -> dict:
    """The device phases in a fork of this process, made before it touched the device."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        code = 0
        try:
            began = time.monotonic()
            result = device_phases(device)
            result["fork to matmul done"] = time.monotonic() - began
        except BaseException as exc:
            result, code = {"error": f"{type(exc).__name__}: {exc}"}, 1
        os.write(write, json.dumps(result).encode())
        os._exit(code)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 65536):
        chunks.append(chunk)
    os.close(read)
    os.waitpid(pid, 0)
    return json.loads(b"".join(chunks))


def interpreter_s() -> float:
    began = time.monotonic()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.monotonic() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default: cpu)")
    parser.add_argument("--forks", type=int, default=3)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    if torch.cuda.is_initialized():
        raise SystemExit("CUDA was initialised by the imports: forks would be bad forks")

    new = {
        "import torch": imported_torch - started,
        "import dynamo": imported_dynamo - imported_torch,
        "import backend": imported_backend - imported_dynamo,
    }
    forks = [in_fork(args.device) for _ in range(args.forks)]
    new.update(device_phases(args.device))  # after the forks: this process may now use CUDA
    new["interpreter"] = interpreter_s()

    print(f"torch {torch.__version__}, device {args.device}, load {os.getloadavg()[0]:.2f}")
    print(f"{'phase (s)':<22} {'new interpreter':>16} {'forks (median, min-max)':>26}")
    for phase in PHASES:
        values = [f[phase] for f in forks if phase in f]
        forked = (
            f"{statistics.median(values):8.3f} ({min(values):.3f}-{max(values):.3f})"
            if values
            else f"{'-':>8} (imported)"
        )
        print(f"{phase:<22} {new[phase]:16.3f} {forked:>26}")
    paid_new = sum(new[phase] for phase in PHASES)
    fork_totals = [f["fork to matmul done"] for f in forks if "fork to matmul done" in f]
    forked_total = statistics.median(fork_totals) if fork_totals else float("nan")
    print(f"{'total':<22} {paid_new:16.3f} {forked_total:8.3f}")
    for index, fork in enumerate(forks):
        if "error" in fork:
            print(f"fork {index}: {fork['error']}")
        else:
            print(
                f"fork {index}: bad fork {fork['bad fork']}, "
                f"allocator peak at start {fork['peak bytes at start']}"
            )
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"device": args.device, "new": new, "forks": forks}, out, indent=1)
    return 0 if all("error" not in f for f in forks) else 1


if __name__ == "__main__":
    sys.exit(main())
