#!/usr/bin/env bash
# The answers of issue 35 on this machine's CPU, each from a real run, with the verdict lines:
#   1. a launch-bound cell (mnist_dense, units 16, batch 16) and a compute-bound one (units
#      2048, batch 2048): different diagnoses, with their evidence;
#   2. fp16 beside float32 (units 64): never "beyond what the device allows" on a quiet machine;
#   3. synthetic data, 3 repeats: accuracy "undecided" (its interval is wide);
#   4. real handwritten digits (benchmarks/real_digits.py), 5 repeats: accuracy "no worse".
#
#   bash benchmarks/answers_with_reasons.sh OUT_DIR DIGITS_CSV
#
# DIGITS_CSV: scikit-learn's sklearn/datasets/data/digits.csv.gz (from an installed copy or
# its wheel). Run it on a quiet machine: the load average is printed before and after.
set -eu
out="$1"
digits="$2"
rm -rf "$out" && mkdir -p "$out"
uptime
mpbench detect 2>/dev/null | grep -iE "cpu|bf16|fp16" | head -6 || true
common=(-f torch -w mnist_dense --device cpu --epochs 1 --warmup-steps 5)
verdicts() {  # run dir: the verdict lines and the bound column of its comparison
    COLUMNS=250 mpbench compare "$1" 2>&1 | sed -n '/^Verdict/,$p' | head -12
    mpbench compare "$1" --format json | python -c '
import json, sys
for c in json.load(sys.stdin)["cells"]:
    b = c["bottleneck"] or {}
    print(c["cell"] + ":", b.get("kind"), "-", b.get("evidence"))'
}
echo "== 1. small (units 16, batch 16) and large (units 2048, batch 2048)"
mpbench run "${common[@]}" -p fp32 -p bf16 --units 16 --batch-size 16 --max-steps 200 \
    --data synthetic --repeat 3 --out "$out/small" >/dev/null
verdicts "$out/small"
mpbench run "${common[@]}" -p fp32 -p bf16 --units 2048 --batch-size 2048 --max-steps 15 \
    --data synthetic --repeat 3 --out "$out/large" >/dev/null
verdicts "$out/large"
echo "== 2. fp16 beside float32 (units 64)"
mpbench run "${common[@]}" -p fp32 -p fp16 --units 64 --max-steps 40 --data synthetic \
    --repeat 3 --out "$out/fp16" >/dev/null
verdicts "$out/fp16"
echo "== 3. synthetic data, 3 repeats"
mpbench run "${common[@]}" -p fp32 -p bf16 --units 64 --max-steps 60 --data synthetic \
    --repeat 3 --out "$out/synthetic" >/dev/null
verdicts "$out/synthetic"
echo "== 4. real digits, 5 repeats"
python "$(dirname "$0")/real_digits.py" "$out/digits" --digits "$digits"
mpbench run -f torch -w mnist_dense --device cpu -p fp32 -p bf16 --units 64 --batch-size 100 \
    --epochs 8 --warmup-steps 5 --data real --data-dir "$out/digits" --repeat 5 \
    --out "$out/digits-run" >/dev/null
verdicts "$out/digits-run"
uptime
