#!/usr/bin/env bash
# Does the suite still catch what it must? Plants one fault at a time in a copy of this
# checkout and runs the tests that should catch it; each fault must make them fail.
#
#   bash benchmarks/mutation_check.sh [NAME ...]     # default: every fault below
#   CONTROL=1 bash benchmarks/mutation_check.sh      # nothing planted: the same tests must pass
#
# The faults: a wrong speed-up (compare inverts the ratio), a record lost on resume (the last
# finished cell is measured again), a signal's exit code (always 130, so SIGTERM is not 143),
# a bad input that ends in a traceback (InvalidInput no longer caught), and a TensorFlow-less
# machine's skip (a missing framework's cells are no longer skipped with its reason). The last
# runs in a second virtual environment without TensorFlow, as CI's pass without it does
# (NOTF_VENV, made with uv when missing). The copy is imported first (PYTHONPATH), in the test
# process and in every process a test starts. Prints one line per fault: caught or MISSED;
# exit 1 if any was missed.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-python}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
notf="${NOTF_VENV:-$work/notf}"

# name | file | original text | planted text | tests that must fail | where to run them
faults=(
    "speedup|mpbench/compare/summary/estimate.py|point = b.median_s / a.median_s|point = a.median_s / b.median_s|tests/compare/test_compare_intervals.py tests/compare/test_compare_cli.py|main"
    "resume|mpbench/runner/loop.py|for record in read_records(path)}|for record in read_records(path)[:-1]}|tests/runner/test_run_torch.py tests/adversarial/test_run_directory.py|main"
    "signal|mpbench/runner/signals.py|return 128 + (exc.signum if isinstance(exc, Terminated) else signal.SIGINT)|return 130|tests/adversarial/test_signals.py|main"
    "traceback|mpbench/cli.py|    except InvalidInput as exc:|    except ZeroDivisionError as exc:|tests/adversarial/test_run_inputs.py|main"
    "no-tensorflow|mpbench/runner/matrix.py|    if missing:\n        return f\"{framework} is not installed: {missing}\"|    if missing and False:\n        return f\"{framework} is not installed: {missing}\"|tests/runner/test_run_user_workload.py|notf"
)
wanted=("$@")

notf_python() {
    if [ ! -x "$notf/bin/python" ]; then
        "$PY" -m uv --version >/dev/null 2>&1 || "$PY" -m pip install -q uv >&2
        echo "making a virtual environment without TensorFlow in $notf (uv) ..." >&2
        "$PY" -m uv venv -q "$notf" --python "$("$PY" -c 'import sys; print(sys.executable)')"
        "$PY" -m uv pip install -q --python "$notf/bin/python" --find-links /opt/wheels \
            torch==2.13.0 >&2
        "$PY" -m uv pip install -q --python "$notf/bin/python" -e "$repo[torch,plot,fp8,hf,test]" >&2
    fi
    echo "$notf/bin/python"
}

missed=0
for fault in "${faults[@]}"; do
    IFS='|' read -r name file original planted tests where <<<"$fault"
    if [ ${#wanted[@]} -gt 0 ] && [[ ! " ${wanted[*]} " == *" $name "* ]]; then
        continue
    fi
    copy="$work/$name"
    mkdir -p "$copy"
    (cd "$repo" && git ls-files -z --cached --others --exclude-standard |
        xargs -0 cp --parents -t "$copy" 2>/dev/null || true)
    "$PY" - "$copy/$file" "$original" "$planted" "$([ "${CONTROL:-0}" = 1 ] && echo control || echo plant)" <<'EOF'
import sys
from pathlib import Path

path, original, planted = Path(sys.argv[1]), *(s.replace("\\n", "\n") for s in sys.argv[2:4])
text = path.read_text()
if text.count(original) != 1:
    sys.exit(f"{path}: the text to change is not there once: {original!r}")
if sys.argv[4] != "control":
    path.write_text(text.replace(original, planted))
EOF
    python_bin="$PY"
    [ "$where" = notf ] && python_bin="$(notf_python)"
    # shellcheck disable=SC2086  # a list of test paths
    if (cd "$copy" && PYTHONPATH="$copy" MPBENCH_TEST_PIN=0 "$python_bin" -m pytest -q -x \
        -p no:cacheprovider $tests >"$work/$name.log" 2>&1); then
        if [ "${CONTROL:-0}" = 1 ]; then
            echo "passed  $name ($where), nothing planted: $(tail -1 "$work/$name.log")"
        else
            echo "MISSED  $name: $tests passed with the fault planted in $file"
            missed=1
        fi
    elif [ "${CONTROL:-0}" = 1 ]; then
        echo "FAILED  $name ($where) with nothing planted: $(tail -1 "$work/$name.log")"
        missed=1
    elif failed="$(grep -m1 -E '^(FAILED|ERROR) ' "$work/$name.log")"; then
        echo "caught  $name ($where): $failed"
    else  # pytest did not run the tests at all: not a catch
        echo "NOT RUN $name: $(tail -1 "$work/$name.log")"
        missed=1
    fi
done
exit "$missed"
