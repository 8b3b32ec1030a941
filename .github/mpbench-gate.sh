#!/usr/bin/env bash
# The mixed-precision benchmark gate that .github/workflows/mpbench.yml runs, and that runs the
# same anywhere else: show the machine (`mpbench detect`), run the CI matrix (`mpbench run`),
# compare it (`mpbench compare`) with the baseline if there is one, and, when asked, make this run
# the baseline. It installs nothing: `mpbench`, with the plot extra, and `python3` must be on PATH.
#
# Usage: .github/mpbench-gate.sh [--save-baseline] [--save-contended]
#
# Environment (the defaults are the workflow's; relative paths are from the repository root):
#   MPBENCH_CONFIG         run configuration                      configs/ci.toml
#   MPBENCH_FRAMEWORK      --framework of the run                 torch
#   MPBENCH_OUT            this run's directory; must not hold a run yet   results/ci
#   MPBENCH_BASELINE       the baseline: a run directory          results/ci-baseline
#   MPBENCH_SAVE_BASELINE  1/true: same as --save-baseline        (off)
#   MPBENCH_SAVE_CONTENDED 1/true: same as --save-contended       (off)
#   MPBENCH_BASELINE_FROM  where the baseline came from, for the messages (the cache key)
#   MPBENCH_PLOT           0/false: no compare.png, no figure in the page (a few seconds less; no matplotlib needed)  (on)
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
# apply, and the run says so. Where float32 ran alone (configs/ci.toml's `policies = ["auto"]`
# on a device with no 16-bit policy rated fast), --max-accuracy-delta is not passed, and the
# log says so. --save-baseline copies this run into MPBENCH_BASELINE when it
# passed, so the next run gates against it; but not a run with contended cells (cells that ran
# beside other work, marked `contended` in the report): every later run would be gated against
# a busy machine's times. Such a run is not saved (exit 1, MPBENCH_BASELINE unchanged) unless
# --save-contended (or MPBENCH_SAVE_CONTENDED=1) says to save it anyway. The report goes to
# MPBENCH_OUT/compare.html (one page, the plot inline: the artifact to open), compare.md and
# compare.png, and, when GITHUB_STEP_SUMMARY is set, to the job summary.
#
# Exit code: `mpbench compare`'s: 0 every gate passed, 1 a gate failed, 2 invalid input; also 1
# when a cell failed to run (`mpbench run` exit 1) or a baseline to save had contended cells,
# and `mpbench run`'s own code when it could not run the matrix (2 invalid input, 128 + N
# stopped by signal N).
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
save_contended=0
if truthy "${MPBENCH_SAVE_CONTENDED:-}"; then
    save_contended=1
fi
for arg in "$@"; do
    case "$arg" in
        --save-baseline) save=1 ;;
        --save-contended) save_contended=1 ;;
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
plot="$out/compare.png"
case "${MPBENCH_PLOT:-1}" in
    0 | false | False | FALSE | no | off) plot="" ;;
esac

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

# The policies of this run's cells that finished, one per line, from its results.jsonl.
# `policies = ["auto"]` (configs/ci.toml) runs float32 alone on a device where no 16-bit policy
# is rated fast (a CPU without avx512_bf16 or AMX, as many hosted runners are).
finished_policies() {
    PYTHONIOENCODING=utf-8 python3 -c '
import json, sys
seen = set()
with open(sys.argv[1], encoding="utf-8") as lines:
    for line in lines:
        line = line.strip()
        if line:
            cell = json.loads(line)
            if cell.get("status") == "ok":
                seen.add(cell.get("policy"))
print("\n".join(sorted(p for p in seen if p)))
' "$out/results.jsonl"
}

args=("$out") # the runs and the gates; each compare below adds where it writes
if [[ -n "$max_accuracy_delta" ]]; then
    ran="$(finished_policies 2>/dev/null || true)"
    if [[ "$ran" == float32 ]]; then
        say "float32 ran alone on this device (the run said which policies it left out and why): --max-accuracy-delta has nothing to compare, so it is not checked; the baseline gates still apply."
    else
        args+=(--max-accuracy-delta "$max_accuracy_delta")
    fi
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

# The verdict and the job summary (compare appends its markdown there itself) come from the
# page's compare: one self-contained compare.html, the figure inline (docs/compare.md, "One page:
# --format html"). The same report as compare.md beside it, for readers of text; it already said
# its failures above, so its stderr is not repeated.
page_args=(--format html --output "$out/compare.html")
if [[ -n "$plot" ]]; then
    page_args+=(--plot "$plot")
fi
compare_rc=0
mpbench compare "${args[@]}" "${page_args[@]}" || compare_rc=$?
GITHUB_STEP_SUMMARY='' mpbench compare "${args[@]}" --format markdown --output "$out/compare.md" \
    2>/dev/null || true
echo "mpbench-gate: report $out/compare.html and $out/compare.md, plot ${plot:-none (MPBENCH_PLOT=${MPBENCH_PLOT:-})}"

rc="$compare_rc"
if ((rc == 0 && run_rc != 0)); then
    rc="$run_rc"
fi

# The cells of this run that ran beside other work, and in how many of their repeats:
# `contended_repeats` of `repeats` in `mpbench compare --format json`, the fact behind the
# table's `contended` status (docs/compare.md, "Busy machines and implausible figures"). Two
# lines, none where no cell was contended: how many cells and repeats (`1 cell contended in 8
# of 8 repeats`, `2 cells contended in 3 of their 16 repeats`), and the cells by the report's
# names (with each one's repeats where there are several). The report is in the job summary
# already: this one is not appended to it.
contended_cells() {
    GITHUB_STEP_SUMMARY='' mpbench compare "$out" --format json |
        PYTHONIOENCODING=utf-8 python3 -c '
import json, sys
busy = [c for c in json.load(sys.stdin)["cells"] if c["contended_repeats"]]
if busy:
    hit, of = sum(c["contended_repeats"] for c in busy), sum(c["repeats"] for c in busy)
    if len(busy) == 1:
        print(f"1 cell contended in {hit} of {of} repeats")
        print(busy[0]["cell"])
    else:
        print(f"{len(busy)} cells contended in {hit} of their {of} repeats")
        each = [(c["cell"], c["contended_repeats"], c["repeats"]) for c in busy]
        print("; ".join(f"{name}: {hit} of {of}" for name, hit, of in each))
'
}

if ((save && rc == 0)); then
    busy_rc=0
    busy="$(contended_cells)" || busy_rc=$?
    if ((busy_rc != 0)); then
        say "Baseline not saved: cannot tell whether this run's cells were contended (mpbench compare exit $busy_rc); $baseline is unchanged."
        rc="$busy_rc"
        save=0
    elif [[ -n "$busy" ]]; then
        count="${busy%%$'\n'*}"
        cells="${busy#*$'\n'}"
        if ((save_contended)); then
            say "Warning: saving a baseline with $count ($cells), as --save-contended asks: later runs are gated against a busy machine's times."
        else
            say "Baseline not saved: $count, run beside other work ($cells); $baseline is unchanged. Re-run on a quiet machine, or pass --save-contended (MPBENCH_SAVE_CONTENDED=1) to save it anyway."
            rc=1
            save=0
        fi
    fi
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
