#!/usr/bin/env bash
# Render the committed compare fixtures in every format, and a plot, with the mpbench of a
# given source tree: to show that a refactor changed no output, byte for byte.
#
#   git worktree add /tmp/before <commit>
#   bash benchmarks/render_fixtures.sh /tmp/before /tmp/out-before
#   bash benchmarks/render_fixtures.sh "$PWD" /tmp/out-after
#   diff -r /tmp/out-before /tmp/out-after    # which.txt differs; plot.svg by its random ids
#
# Each fixture run is rendered alone and against tests/compare/fixtures/baseline_cpu with
# every gate (the gated exit code and stderr are kept too). Runs the python on PATH.
#
# Run directories named after the two arguments are rendered too, each alone and all of them
# together, in every format and as a plot: runs with recipe rows (`--loss-scale 1024`,
# `--batch-scale-16bit 2`, `--on-diverge fallback`), data-parallel and fp8 cells, which the
# committed fixtures lack.
#
# Then the fixture runs and those run directories go into one store (`mpbench store add`, made
# with the same tree), and `mpbench history` renders it in every format, by commit, by date and
# by device (the fleet), each with its stderr and exit code: history.BY.FORMAT(.err).
set -u
if (($# < 2)); then
    echo "usage: $0 SOURCE_TREE OUTPUT_DIR [RUN_DIR ...]" >&2
    exit 2
fi
src="$(cd "$1" && pwd)"
out="$2"
shift 2
runs=()
for run in "$@"; do runs+=("$(cd "$run" && pwd)"); done
fixtures="$(cd "$(dirname "$0")/.." && pwd)/tests/compare/fixtures"
rm -rf "$out" && mkdir -p "$out"
out="$(cd "$out" && pwd)"
cd /  # so that neither tree is on sys.path by accident; PYTHONPATH picks the one asked for
export PYTHONPATH="$src" COLUMNS=200
python -c "import mpbench; print(mpbench.__file__)" >"$out/which.txt"
gates=(--baseline "$fixtures/baseline_cpu" --max-slowdown 10% --max-memory-increase 5%
    --max-accuracy-drop 0.5 --min-speedup bf16=1.1 --max-accuracy-delta 5)
for format in table markdown json csv benchmark-action; do
    python -m mpbench compare "$fixtures/cpu_run" --format "$format" \
        >"$out/run.$format" 2>"$out/run.$format.err"
    echo "exit $?" >>"$out/run.$format.err"
    python -m mpbench compare "$fixtures/cpu_run" "${gates[@]}" --format "$format" \
        >"$out/gated.$format" 2>"$out/gated.$format.err"
    echo "exit $?" >>"$out/gated.$format.err"
done
for plot in png svg; do
    python -m mpbench compare "$fixtures/cpu_run" --plot "$out/plot.$plot" >/dev/null 2>&1
done
render() {  # name, run dirs...
    local name="$1"
    shift
    for format in table markdown json csv benchmark-action; do
        python -m mpbench compare "$@" --format "$format" >"$out/$name.$format" 2>&1
        echo "exit $?" >>"$out/$name.$format"
    done
    python -m mpbench compare "$@" --plot "$out/$name.png" >/dev/null 2>&1
}
if ((${#runs[@]})); then
    for run in "${runs[@]}"; do render "extra-$(basename "$run")" "$run"; done
    render extra-all "${runs[@]}"
fi
# In OUT, by a relative name: the reports name the store, and OUT differs between renders.
# Nothing of either tree is in OUT, so `python -m` there still imports PYTHONPATH's mpbench.
cd "$out"
python -m mpbench store add --store store.sqlite "$fixtures/cpu_run" "$fixtures/baseline_cpu" \
    "${runs[@]}" >store.add 2>&1
echo "exit $?" >>store.add
for by in commit date device; do
    for format in table markdown json csv; do
        python -m mpbench history store.sqlite --by "$by" --format "$format" \
            >"history.$by.$format" 2>"history.$by.$format.err"
        echo "exit $?" >>"history.$by.$format.err"
    done
done
rm -f store.sqlite  # SQLite's bytes are not the output; what history renders of them is
echo "rendered with $(cat "$out/which.txt") into $out"
