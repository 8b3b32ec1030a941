#!/usr/bin/env bash
# The CPU the Keras guide names (issue 54): every figure of an AMX Xeon, each beside its plain
# loop, in one sitting. Each step is interleaved within itself (mpbench and the plain loop,
# float32 and bf16, round by round); the load average is printed before and after each.
# Run it on a quiet machine, alone (about 30 minutes on 2 cores):
#
#     bash benchmarks/amx_cpu.sh [OUT]     # OUT: where the logs go (default amx-cpu-<date>)
#
# 1. detect, and detect --measure (peaks, and each framework's step per policy, cached: the
#    default run below rates from it);
# 2. torch: mpbench's cell against a hand-written loop at the CPU default (64 units, batch
#    8192) and at 1024 units (benchmarks/harness_overhead.py, with the loop on mpbench's data
#    path too);
# 3. Keras: mpbench against the guide's own fit code, throughput and bf16 speed-up, at the
#    guide's CPU size and at 1024 units (benchmarks/keras_end_to_end.py);
# 4. where bf16 starts to pay: the width sweep, both frameworks, and torch's remedies
#    (benchmarks/amx_width_sweep.py);
# 5. the early stop on Keras fp16 (named, so it runs) at batch 512;
# 6. the default `mpbench run`: its wall time and every cell's status.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-amx-cpu-$(date +%Y%m%d-%H%M)}"
mkdir -p "$out"
load() { cut -d' ' -f1-3 /proc/loadavg; }
step() {
    local name="$1"
    shift
    echo "== $name: $* (load before $(load))"
    local began=$SECONDS
    "$@" >"$out/$name.log" 2>&1
    local rc=$?
    tail -n 25 "$out/$name.log"
    echo "== $name: exit $rc, $((SECONDS - began)) s (load after $(load))"
    echo
}

step detect mpbench detect
step measure mpbench detect --measure --json
step torch-default python benchmarks/harness_overhead.py --framework torch --units 64 \
    --batch-size 8192 --steps 60 --rounds 5 --shuffled
step torch-1024 python benchmarks/harness_overhead.py --framework torch --units 1024 \
    --batch-size 1024 --steps 60 --rounds 3
step keras-guide-default python benchmarks/keras_end_to_end.py --units 64 --batch-size 8192 \
    --epochs 5 --max-steps 35 --rounds 3
step keras-guide-1024 python benchmarks/keras_end_to_end.py --units 1024 --batch-size 1024 \
    --epochs 3 --max-steps 60 --rounds 3
step width-sweep python benchmarks/amx_width_sweep.py --widths 64 256 1024 --rounds 3
step keras-fp16-stop mpbench run -f tensorflow -w mnist_dense -p float32 -p fp16 -p bf16 \
    --batch-size 512 --repeat 1 --data synthetic --device cpu --out "$out/keras-fp16"
step default-run mpbench run --out "$out/default"
python - "$out/default" <<'EOF'
import json, sys
from pathlib import Path
records = [json.loads(line) for line in (Path(sys.argv[1]) / "results.jsonl").open()]
for r in records:
    step = (r.get("step_time") or {}).get("median_s")
    shown = f"{step * 1e3:8.2f} ms" if step else " " * 11
    print(f"{r['cell_id']:<48}{r['status']:<9}{shown}  wall {r['wall_s']:6.1f} s  {r.get('reason') or ''}")
print(f"{len(records)} cells, cell wall time {sum(r['wall_s'] for r in records):.0f} s")
EOF
