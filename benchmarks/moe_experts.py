"""What bf16 buys a mixture-of-experts model when its experts run in bf16, and when they do not
(issue 56, item 3).

transformers 5 runs MoE experts through aten._grouped_mm, which torch's autocast does not
cover: under bf16 they ran in float32, and the bf16 cell mostly compared float32 with float32.
Routed through mm (`experts_implementation=eager`), autocast covers them. This runs one
`mpbench run` with the same small Mixtral named three times, its experts grouped (float32
under bf16), eager, and as mpbench chooses by default (grouped, cast to bf16), each
under float32 and bf16 (the matrix interleaves the cells and pairs each bf16 repeat with its
float32 twin), then reads back through `mpbench compare --format json` each form's bf16
speed-up over its own float32, with its interval, and the share of matmul FLOPs that ran in
bfloat16. Run it on a quiet machine: the load average is printed at both ends.

    python benchmarks/moe_experts.py [--repeat 3] [--max-steps 30] [--hidden 256]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from compared import compared_cells  # benchmarks/compared.py: the script's folder is on sys.path


def mixtral(hidden: int, experts: str) -> str:
    """The model; `experts` "default": mpbench's choice per policy (grouped_mm, cast to the
    16-bit dtype under a 16-bit policy), else the experts_implementation key."""
    key = "" if experts == "default" else f"&experts_implementation={experts}"
    return (
        f"hf:mixtral?hidden_size={hidden}&intermediate_size={2 * hidden}&num_hidden_layers=2"
        f"&num_attention_heads=4&num_key_value_heads=2&num_local_experts=4"
        f"&num_experts_per_tok=2&vocab_size=512&max_position_embeddings=128&seq_len=64"
        f"&samples=512{key}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", default="3")
    parser.add_argument("--max-steps", type=int, default=30)
    parser.add_argument("--hidden", type=int, default=256)
    args = parser.parse_args()
    forms = {e: mixtral(args.hidden, e) for e in ("grouped_mm", "eager", "default")}
    print(f"load average {os.getloadavg()[0]:.2f} at the start", flush=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        command = [
            sys.executable,
            "-m",
            "mpbench",
            "run",
            "-f",
            "torch",
            "-p",
            "float32",
            "-p",
            "mixed_bfloat16",
            "--device",
            "cpu",
            "--max-steps",
            str(args.max_steps),
            "--repeat",
            str(args.repeat),
            "--stop-slower-than",
            "off",
            "--out",
            str(out),
        ]
        for name in forms.values():
            command += ["-w", name]  # fmt: skip
        subprocess.run(command, check=True, capture_output=True, text=True)
        cells = compared_cells(out)
        records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    print(
        f"\nhf:mixtral hidden {args.hidden}, 2 layers, 4 experts top-2, seq 64, "
        f"--max-steps {args.max_steps}, --repeat {args.repeat} "
        f"({time.monotonic() - started:.0f} s), load average {os.getloadavg()[0]:.2f} at the end"
    )
    for experts, name in forms.items():
        cell = next(c for c in cells if c["workload"] == name and c["policy"] == "mixed_bfloat16")
        speedup = cell["speedup_vs_float32"]
        interval = speedup["interval"] or {"low": speedup["value"], "high": speedup["value"]}
        shares = [
            r["precision"].get("matmul_share_low_precision")
            for r in records
            if r["workload"] == name and r["policy"] == "mixed_bfloat16"
        ]
        step = {
            c["policy"]: c["step_time_ms"]["value"]
            for c in cells
            if c["workload"] == name and c["step_time_ms"]
        }
        print(
            f"experts {experts:<10}  float32 {step.get('float32', float('nan')):8.2f} ms  "
            f"bf16 {step.get('mixed_bfloat16', float('nan')):8.2f} ms  speed-up "
            f"{speedup['value']:.2f}x ({interval['low']:.2f}-{interval['high']:.2f})  matmul "
            f"FLOPs in bf16: {', '.join(f'{s:.0%}' for s in shares if s is not None)}  "
            f"contended repeats {cell['contended_repeats']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
