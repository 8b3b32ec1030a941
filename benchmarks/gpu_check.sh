#!/usr/bin/env bash
# The prepared GPU check: everything worth measuring when a GPU machine is at hand for a few
# minutes, in one command, with no network needed (docs/gpu-check.md).
#
#   bash benchmarks/gpu_check.sh               # on a machine with an NVIDIA GPU, ~8 minutes
#   DRY=1 bash benchmarks/gpu_check.sh         # tiny versions of every step on a CPU (CI)
#
# Run it from anywhere; it works in the repository root. Each step has its own time box, cut
# to one global deadline (BUDGET_S, default 480 s; DRY: 300 s), and is stopped with SIGINT at
# its box, so `mpbench run` keeps what it finished and pytest prints what it ran. Everything
# goes under one folder, then into a .tar.gz beside it:
#   GPU_CHECK_OUT if set, else $OUT/gpu-check if OUT is set, else results/gpu-check-<time>
# Settings (environment): DRY, BUDGET_S, PYTHON (default python3), WORKERS (pytest-xdist
# workers; default min(cores, 8)), WHEELS (a folder of wheels to install for this check
# only, into the output folder: for a machine without network, e.g. torchao for fp8), SKIP
# (step names to leave out, e.g. SKIP="run-default tests"), TESTS (the test paths the tests
# step runs; default the whole suite).
# Exit status: the number of steps that failed (a step stopped at its time box has not
# failed: it was cut short, and the summary says so).
set -uo pipefail
cd "$(dirname "$0")/.."

DRY="${DRY:-0}"
PY="${PYTHON:-python3}"
if [ "$DRY" = 1 ]; then budget="${BUDGET_S:-300}"; else budget="${BUDGET_S:-480}"; fi
dir="${GPU_CHECK_OUT:-${OUT:+$OUT/gpu-check}}"
dir="${dir:-results/gpu-check-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
summary="$dir/summary.txt"
: >"$summary"
started=$(date +%s)
deadline=$((started + budget))
failed=0

# The check's own measured-peak cache (detect --measure, then the runs' MFU), wide tables,
# output as it happens.
export MPBENCH_CACHE="$dir/cache" PYTHONUNBUFFERED=1 COLUMNS="${COLUMNS:-200}"

say() { echo "$*" | tee -a "$summary"; }

# step NAME BOX_SECONDS COMMAND [ARGS...]: run it under min(box, time left), its output in
# NAME.log and on the terminal; one summary line.
step() {
    local name=$1 box=$2 left t rc began ended verdict
    shift 2
    if [[ " ${SKIP:-} " == *" $name "* ]]; then
        say "$(printf '%-16s %-34s' "$name" 'skipped: in SKIP')"
        return
    fi
    left=$((deadline - $(date +%s)))
    if [ "$left" -lt 5 ]; then
        say "$(printf '%-16s %-34s' "$name" 'skipped: the global deadline passed')"
        return
    fi
    t=$((box < left ? box : left))
    echo "=== $name (time box ${t} s): $*"
    began=$(date +%s.%N)
    timeout --signal=INT --kill-after=30 "$t" "$@" 2>&1 | tee "$dir/$name.log"
    rc=${PIPESTATUS[0]}
    ended=$(date +%s.%N)
    case $rc in
        0) verdict="ok" ;;
        124 | 130) verdict="stopped at its ${t} s time box" ;;
        137) verdict="killed at its ${t} s time box" ;;
        *) verdict="FAILED (exit $rc)"; failed=$((failed + 1)) ;;
    esac
    say "$(printf '%-16s %-34s %7.1f s' "$name" "$verdict" "$(awk "BEGIN { print $ended - $began }")")"
}

if [ -n "${WHEELS:-}" ]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$dir/site" "$WHEELS"/*.whl \
        && export PYTHONPATH="$dir/site${PYTHONPATH:+:$PYTHONPATH}"
fi
# This checkout's mpbench, importable from anywhere (the tests start it from their temporary
# folders) and as the `mpbench` command (the CI gate script calls it): asked from / because
# the checkout's own folder would always find it.
repo="$PWD"
this_checkout() {
    (cd / && "$PY" -c "import mpbench, pathlib, sys
sys.exit(pathlib.Path(mpbench.__file__).resolve().parent != pathlib.Path('$repo/mpbench').resolve())") 2>/dev/null
}
if ! this_checkout || ! command -v mpbench >/dev/null; then
    # No network: the checkout itself, without its dependencies (a GPU image has them).
    "$PY" -m pip install -q --no-deps --no-build-isolation -e . >"$dir/install.log" 2>&1
    this_checkout || export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
fi
mp() { "$PY" -m mpbench "$@"; }
export -f mp
export PY

if [ "$DRY" = 1 ]; then
    device=cpu
    # Tiny sizes: each step's machinery, not its figures.
    export MPBENCH_MEASURE_SIZES=32,64 MPBENCH_MEASURE_BUDGET=0.2
    # detect --measure's training steps in torch alone, at a small batch: a GPU machine has
    # torch alone (docs/gpu-check.md), and TensorFlow's step child is tests/detect's. The
    # step took 28.7 s of this check's 108 s on a 2-core AMX Xeon with TensorFlow's import
    # and its fp16 step at batch 8192 (load 0.67 before), 10.0 s so (load 1.21 before).
    export MPBENCH_MEASURE_STEP_FRAMEWORKS=torch MPBENCH_MEASURE_STEP_BATCH=512
    tiny=(--data synthetic --device cpu --repeat 1 --max-steps 6 --warmup-steps 2 --units 32
        --batch-size 64 --threads 1)
    default_run=(-f torch -w mnist_dense -p fp32 -p bf16 "${tiny[@]}")
    # fp8 against bf16, both eager: the step's machinery without torch.compile, which costs
    # most of this check's CPU seconds here and is proven elsewhere (compiled fp8 through
    # the CLI: tests/backends/test_torch_fp8.py; fp8 compiled once beside compiled bf16:
    # tests/runner/test_compile_once.py). The GPU check runs each both ways.
    fp8_run=(-f torch -w mnist_dense -p bf16 -p fp8 --fp8-eager "${tiny[@]}")
    fp8_large_run=()  # 43 TFLOP a step: not on a CPU
    # A Hugging Face model by name (transformers needed), tiny here.
    hf_run=(-f torch -w 'hf:llama?hidden_size=64&intermediate_size=256&num_hidden_layers=1&num_attention_heads=2&num_key_value_heads=2&vocab_size=256&seq_len=32&samples=64'
        -p bf16 -p fp8 --fp8-eager --device cpu --repeat 1 --max-steps 6 --warmup-steps 2
        --batch-size 8 --threads 1)  # its own data: no --data
    tests=(tests/test_policies.py)
    rounds=1
else
    device=cuda
    default_run=(--data synthetic)
    both_ways=(-f torch -p bf16 -p fp8 --compile --also-eager --fp8-eager --data synthetic --repeat 1
        --timeout 180)
    fp8_run=(-w mnist_dense -w transformer_lm "${both_ways[@]}")
    fp8_large_run=(-w transformer_lm_large "${both_ways[@]}" --max-steps 25 --warmup-steps 5)
    # Your model at a size where fp8 should pay: a 2-block Llama of width 4096 (MLP 14336,
    # grouped-query attention 32/8 heads), 4 sequences of 2048 tokens: every projection at
    # M = 8192 with K, N >= 1024; bf16 and fp8 compiled (fp8's default), the prediction beside.
    hf_run=(-f torch -w 'hf:llama?hidden_size=4096&intermediate_size=14336&num_hidden_layers=2&num_attention_heads=32&num_key_value_heads=8&vocab_size=32000&seq_len=2048&samples=64'
        -p bf16 -p fp8 --compile --batch-size 4 --repeat 1 --max-steps 20
        --warmup-steps 5 --timeout 180)
    cores=$(nproc)
    workers="${WORKERS:-$((cores < 8 ? cores : 8))}"
    tests=(-n "$workers" --dist loadfile)
    "$PY" -c "import xdist" 2>/dev/null || tests=()
    rounds=2
fi
# shellcheck disable=SC2206  # TESTS is a list of paths, split on spaces
[ -n "${TESTS:-}" ] && tests+=($TESTS)

say "mpbench GPU check ($( [ "$DRY" = 1 ] && echo 'DRY: tiny steps on the CPU' || echo "device $device")), $(date -u +%FT%TZ), budget ${budget} s, output $dir"
say "mpbench from $(cd / && "$PY" -c 'import mpbench; print(mpbench.__file__)' 2>&1 | tail -1), command: $(command -v mpbench || echo 'none (tests that call it fail)')"
say "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"

step machine 30 bash -c '
    nvidia-smi 2>/dev/null || echo "nvidia-smi: not found (no NVIDIA driver here)"
    echo "cores $(nproc), load $(cut -d" " -f1-3 /proc/loadavg)"
    "$PY" - <<EOF
import importlib.util, platform, torch
print("python", platform.python_version(), "| torch", torch.__version__, "| CUDA", torch.version.cuda)
for name in ("torchao", "tensorflow", "pynvml", "xdist"):
    print(name, "installed" if importlib.util.find_spec(name) else "not installed")
EOF'
step startup-phases 90 "$PY" benchmarks/startup_phases.py --device "$device" --forks 3 \
    --json "$dir/startup_phases.json"
step detect 60 "$PY" -m mpbench detect
step detect-json 90 bash -c "\"\$PY\" -m mpbench detect --json --probe > '$dir/detect.json'"
step detect-measure 120 "$PY" -m mpbench detect --measure --device "$device"
step cell-startup 90 "$PY" benchmarks/cell_startup.py --framework torch --device "$device" \
    --rounds "$rounds" --max-steps 10
step run-default 200 "$PY" -m mpbench run "${default_run[@]}" --out "$dir/run-default"
if [ ${#fp8_large_run[@]} -gt 0 ]; then
    step run-fp8-large 200 "$PY" -m mpbench run "${fp8_large_run[@]}" --out "$dir/run-fp8-large"
else
    say "$(printf '%-16s %-34s' run-fp8-large 'skipped: DRY (43 TFLOP a step)')"
fi
step run-fp8 170 "$PY" -m mpbench run "${fp8_run[@]}" --out "$dir/run-fp8"
if "$PY" -c "import transformers" 2>/dev/null; then
    step run-hf 150 "$PY" -m mpbench run "${hf_run[@]}" --out "$dir/run-hf"
else
    say "$(printf '%-16s %-34s' run-hf 'skipped: transformers is not installed (WHEELS)')"
fi
step compare 40 bash -c "
    for run in run-default run-fp8 run-fp8-large run-hf; do
        [ -s '$dir'/\$run/results.jsonl ] || { echo \"\$run: no results\"; continue; }
        mp compare '$dir'/\$run --format markdown -o '$dir'/compare-\$run.md \
            --plot '$dir'/compare-\$run.png || exit 1
        cat '$dir'/compare-\$run.md
    done"
step tests 600 "$PY" -m pytest -v -p no:cacheprovider "${tests[@]}"

# The figures the closing note asks for, from the records.
"$PY" - "$dir" <<'EOF' | tee -a "$summary"
import json, statistics, sys
from pathlib import Path

def fp8_lines(records):
    """fp8 against bf16 of the same compile state: measured and predicted, per cell."""
    done = [r for r in records if r["status"] == "ok"]
    for r in (r for r in done if r.get("fp8")):
        fp8 = r["fp8"]
        compiled = r.get("compile") is not None
        partner = [
            b for b in done
            if b["policy"] == "mixed_bfloat16" and b["workload"] == r["workload"]
            and (b.get("compile") is not None) == compiled
        ]
        step = r["step_time"]["median_s"]
        measured = partner[0]["step_time"]["median_s"] / step if partner else None
        prediction = fp8.get("prediction") or {}
        predicted = prediction.get("predicted_gain")
        if fp8["mode"] == "emulated":
            versus = "emulated, numerics only"
        else:
            versus = f"vs bf16 {measured:.2f}x measured" if measured else "no bf16 partner"
        print(
            f"  fp8 {r['workload']} {'compiled' if compiled else 'eager'} ({fp8['mode']}): "
            f"{step * 1e3:.2f} ms a step; {versus}"
            + (f", {predicted:.2f}x predicted" if predicted else "")
            + f" ({prediction.get('note') or prediction.get('method', 'no prediction')})"
            + (f"; compile {r['compile']['compile_s']:.1f} s" if compiled else "")
        )


for run in ("run-default", "run-fp8", "run-fp8-large"):
    path = Path(sys.argv[1]) / run / "results.jsonl"
    if not path.exists():
        print(f"{run}: no results")
        continue
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    by = {}
    for r in records:
        started = r.get("startup") or {}
        if started.get("seconds") is not None:
            by.setdefault((r["framework"], started.get("launcher")), []).append(started["seconds"])
    statuses = {}
    for r in records:
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    print(f"{run}: {len(records)} cells {statuses}")
    fp8_lines(records)
    for (framework, launcher), seconds in sorted(by.items()):
        print(
            f"  start-up {framework} ({launcher}): median {statistics.median(seconds):.2f} s, "
            f"{min(seconds):.2f}-{max(seconds):.2f} over {len(seconds)} cells"
        )
EOF
say "total $(($(date +%s) - started)) s, $failed step(s) failed"
tar -czf "$dir.tar.gz" -C "$(dirname "$dir")" "$(basename "$dir")" 2>/dev/null \
    && echo "everything: $dir.tar.gz"
exit "$failed"
