#!/usr/bin/env bash
# The mixed-precision benchmark gate that .github/workflows/mpbench.yml runs, and that runs the
# same anywhere else: show the machine (`mpbench detect`), run the CI matrix (`mpbench run`),
# compare it (`mpbench compare`) with the baseline if there is one, and, when asked, make this run
# the baseline. It installs nothing: `mpbench`, with the plot extra, must be on PATH.
#
# Usage: .github/mpbench-gate.sh [--save-baseline]
#
# Environment (the defaults are the workflow's; relative paths are from the repository root):
#   MPBENCH_CONFIG         run configuration                      configs/ci.toml
#   MPBENCH_FRAMEWORK      --framework of the run                 torch
#   MPBENCH_OUT            this run's directory; must not hold a run yet   results/ci
#   MPBENCH_BASELINE       the baseline: a run directory          results/ci-baseline
#   MPBENCH_SAVE_BASELINE  1/true: same as --save-baseline        (off)
#   MPBENCH_BASELINE_FROM  where the baseline came from, for the messages (the cache key)
# Limits, each as `mpbench compare` takes it; an empty value turns that gate off:
#   MPBENCH_MAX_SLOWDOWN         step time vs the baseline        5%
#   MPBENCH_MAX_MEMORY_INCREASE  training memory vs the baseline  25%
#   MPBENCH_MAX_ACCURACY_DROP    test accuracy vs the baseline, points  2
#   MPBENCH_MAX_ACCURACY_DELTA   accuracy vs float32 of this run, ± points  5
#   MPBENCH_MIN_SPEEDUP          POLICY=X speed-ups vs float32 of this run, space-separated  (none)
#   MPBENCH_ALLOW_DIFFERENT_HARDWARE  1: gate against a baseline from another CPU model  1
#   MPBENCH_REQUIRE_CONCLUSIVE        1: an inconclusive gate fails                      0
#
# With no results.jsonl in MPBENCH_BASELINE, only the within-run gates (accuracy delta, speed-ups)
# apply, and the run says so. --save-baseline copies this run into MPBENCH_BASELINE when it
# passed, so the next run gates against it. The report goes to MPBENCH_OUT/compare.md and
# compare.png, and, when GITHUB_STEP_SUMMARY is set, to the job summary.
#
# Exit code: `mpbench compare`'s: 0 every gate passed, 1 a gate failed, 2 invalid input; also 1
# when a cell failed to run (`mpbench run` exit 1), and `mpbench run`'s own code when it could
# not run the matrix (2 invalid input, 128 + N stopped by signal N).
set -euo pipefail

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
}

truthy() {
    case "${1:-}" in
        1 | true | True | TRUE | yes | on) return 0 ;;
        *) return 1 ;;
    esac
}

save=0
if truthy "${MPBENCH_SAVE_BASELINE:-}"; then
    save=1
fi
for arg in "$@"; do
    case "$arg" in
        --save-baseline) save=1 ;;
        -h | --help)
            usage
            exit 0
            ;;
        *)
            echo "mpbench-gate: unknown argument: $arg (see --help)" >&2
            exit 2
            ;;
    esac
done

cd "$(dirname "$0")/.."

config="${MPBENCH_CONFIG:-configs/ci.toml}"
framework="${MPBENCH_FRAMEWORK:-torch}"
out="${MPBENCH_OUT:-results/ci}"
baseline="${MPBENCH_BASELINE:-results/ci-baseline}"
baseline_from="${MPBENCH_BASELINE_FROM:-}"
max_slowdown="${MPBENCH_MAX_SLOWDOWN-5%}"
max_memory_increase="${MPBENCH_MAX_MEMORY_INCREASE-25%}"
max_accuracy_drop="${MPBENCH_MAX_ACCURACY_DROP-2}"
max_accuracy_delta="${MPBENCH_MAX_ACCURACY_DELTA-5}"
min_speedup="${MPBENCH_MIN_SPEEDUP:-}"
allow_different_hardware="${MPBENCH_ALLOW_DIFFERENT_HARDWARE-1}"
require_conclusive="${MPBENCH_REQUIRE_CONCLUSIVE:-0}"

if [[ "${out%/}" == "${baseline%/}" ]]; then
    echo "mpbench-gate: MPBENCH_OUT and MPBENCH_BASELINE are the same directory ($out)" >&2
    exit 2
fi

# One line to the log and, in GitHub Actions, to the job summary (a summary that cannot be
# written is not worth failing the job for).
say() {
    echo "mpbench-gate: $1"
    if [[ -n "${GITHUB_STEP_SUMMARY:-}" ]]; then
        { printf '%s\n\n' "$1" >>"$GITHUB_STEP_SUMMARY"; } 2>/dev/null ||
            echo "mpbench-gate: warning: cannot append to GITHUB_STEP_SUMMARY ($GITHUB_STEP_SUMMARY)" >&2
    fi
}

have_baseline=0
if [[ -f "$baseline/results.jsonl" ]]; then
    have_baseline=1
fi

mpbench detect

run_rc=0
mpbench run --config "$config" --framework "$framework" --out "$out" || run_rc=$?
case "$run_rc" in
    0) ;;
    1) echo "mpbench-gate: a cell failed to run (mpbench run exit 1); comparing what finished" >&2 ;;
    *)
        echo "mpbench-gate: mpbench run exited $run_rc: nothing to compare" >&2
        exit "$run_rc"
        ;;
esac

args=("$out" --format markdown --output "$out/compare.md" --plot "$out/compare.png")
if [[ -n "$max_accuracy_delta" ]]; then
    args+=(--max-accuracy-delta "$max_accuracy_delta")
fi
for speedup in $min_speedup; do # space-separated POLICY=X list: split on purpose
    args+=(--min-speedup "$speedup")
done
if truthy "$require_conclusive"; then
    args+=(--require-conclusive)
fi

if ((have_baseline)); then
    args+=(--baseline "$baseline")
    if truthy "$allow_different_hardware"; then
        args+=(--allow-different-hardware)
    fi
    if [[ -n "$max_slowdown" ]]; then
        args+=(--max-slowdown "$max_slowdown")
    fi
    if [[ -n "$max_memory_increase" ]]; then
        args+=(--max-memory-increase "$max_memory_increase")
    fi
    if [[ -n "$max_accuracy_drop" ]]; then
        args+=(--max-accuracy-drop "$max_accuracy_drop")
    fi
    say "Gating against the baseline in $baseline${baseline_from:+ (restored from $baseline_from)}."
elif ((save)); then
    say "No baseline yet in $baseline: this run becomes it if it passes. Only the within-run gates apply now; the next run is gated against this one."
else
    say "No baseline yet in $baseline: only the within-run gates apply. A passing run with --save-baseline (in the workflow: a push to main) creates it."
fi

compare_rc=0
mpbench compare "${args[@]}" || compare_rc=$?
echo "mpbench-gate: report $out/compare.md, plot $out/compare.png"

rc="$compare_rc"
if ((rc == 0 && run_rc != 0)); then
    rc="$run_rc"
fi

if ((save)); then
    if ((rc == 0)); then
        mkdir -p "$baseline"
        for name in results.jsonl results.csv environment.json run.json; do
            rm -f "$baseline/$name"
            if [[ -f "$out/$name" ]]; then
                cp -p "$out/$name" "$baseline/$name"
            fi
        done
        say "Baseline saved: $baseline now holds this run; the next run is gated against it."
    else
        say "Baseline not saved: this run did not pass (exit $rc); $baseline is unchanged."
    fi
fi
exit "$rc"
