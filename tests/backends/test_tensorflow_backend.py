"""Real tiny trainings through the TensorFlow / Keras 3 backend.

Each cell runs in its own process, as the runner does: the Keras global policy and the
TF32 flag are process-global, so cells sharing a process could hide a policy not being set.
All cells of this module run once and the tests read their results. The two cells whose
stderr is asserted start as new interpreters (TensorFlow's import, and its banner, is then
theirs); the others are forked, one after the other, by one process that imported TensorFlow
as mpbench's own fork server does (runner/launchers/zygote.py's preload), each fork a fresh
process as a cell forked by the runner is, less the ~6 s of a TensorFlow import each.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from builders import cell_spec

from mpbench.workloads import get_workload

# find_spec, not importorskip: the cells import TensorFlow in their own processes, and this
# one need not pay for the import.
if importlib.util.find_spec("tensorflow") is None:
    pytest.skip("TensorFlow is not installed", allow_module_level=True)

pytestmark = pytest.mark.tensorflow

RESULT = "MPBENCH_TEST_RESULT "

# Runs a few requests in one fresh interpreter: cells (run_cell), or Keras parameter counts.
# Knobs force real failure modes: a NaN output bias (a non-finite loss from the first step;
# NaN inputs would not do, oneDNN's fused ReLU turns NaN into 0), or a LossScaleOptimizer
# starting at a scale that overflows float16 gradients.
CHILD = r"""
import dataclasses, json, sys
import numpy as np
from mpbench.backends import base
from mpbench.backends.base import CellSpec

job = JOB if "JOB" in globals() else json.loads(sys.argv[1])  # JOB: a fork's
if job.get("initial_loss_scale"):
    import keras
    init = keras.optimizers.LossScaleOptimizer.__init__
    init.__defaults__ = (float(job["initial_loss_scale"]),) + init.__defaults__[1:]

if any(r.get("nan_logits") for r in job["requests"].values()):
    from mpbench.backends.tensorflow import models

    real_build = models.build_model
    def build_with_nan_logits(workload, units):
        model = real_build(workload, units)
        logits = model.layers[-2]  # the last Dense, before the softmax
        logits.bias.assign(np.full(logits.bias.shape, np.nan, dtype="float32"))
        return model

from mpbench.backends.tensorflow.backend import run_cell

results = {}
for name, request in job["requests"].items():
    if "params" in request:
        from mpbench.backends.tensorflow.models import build_model
        from mpbench.workloads import get_workload
        results[name] = [
            [w, u, build_model(get_workload(w), u).count_params()] for w, u in request["params"]
        ]
        continue
    if request.get("nan_logits"):
        models.build_model = build_with_nan_logits
    progress, warnings = [], []
    try:
        measurements = run_cell(
            CellSpec(**request["spec"]), lambda s, t: progress.append((s, t)), warnings.append
        )
        out = {"measurements": dataclasses.asdict(measurements)}
    except Exception as exc:
        out = {"error": type(exc).__name__, "message": str(exc)}
    results[name] = {**out, "progress": progress, "warnings": warnings}
print("MPBENCH_TEST_RESULT " + json.dumps(results))
"""

UNITS = 32
TRAIN, TEST, BATCH, EPOCHS = 2048, 512, 64, 3  # 32 steps per epoch
STEPS_PER_EPOCH = TRAIN // BATCH
CUT = 2 * STEPS_PER_EPOCH + 5  # a max_steps that stops the 3rd epoch after 5 steps


def mnist_spec(policy: str, loop: str, **changes: Any) -> dict[str, Any]:
    spec = cell_spec(
        framework="tensorflow",
        policy=policy,
        batch_size=BATCH,
        epochs=EPOCHS,
        max_steps=None,
        units=UNITS,
        synthetic_train_size=TRAIN,
        synthetic_test_size=TEST,
        loop=loop,
    )
    return {**asdict(spec), **changes}


CIFAR_SPEC = {
    **mnist_spec("float32", "fit"),
    "cell_id": "tensorflow-cifar10_cnn",
    "workload": "cifar10_cnn",
    "units": None,
    "batch_size": 32,
    "epochs": 1,
    "max_steps": 5,
    "synthetic_train_size": 256,
    "synthetic_test_size": 64,
}

# The trainings whose effective state is asserted get a process each; the rest share.
JOBS: dict[str, dict[str, Any]] = {
    "fit-float32": {"requests": {"fit-float32": {"spec": mnist_spec("float32", "fit")}}},
    "fit-mixed_bfloat16": {
        "requests": {
            "fit-mixed_bfloat16": {"spec": mnist_spec("mixed_bfloat16", "fit", max_steps=CUT)}
        }
    },
    "fit-mixed_float16": {
        "requests": {"fit-mixed_float16": {"spec": mnist_spec("mixed_float16", "fit")}}
    },
    "custom-float32": {"requests": {"custom-float32": {"spec": mnist_spec("float32", "custom")}}},
    "custom-mixed_bfloat16": {
        "requests": {
            "custom-mixed_bfloat16": {"spec": mnist_spec("mixed_bfloat16", "custom", max_steps=CUT)}
        }
    },
    "custom-mixed_float16": {
        "requests": {
            "custom-mixed_float16": {"spec": mnist_spec("mixed_float16", "custom", jit=True)}
        }
    },
    "other-workloads-and-refusals": {
        "requests": {
            "cifar10_cnn": {"spec": CIFAR_SPEC},
            "params": {
                "params": [
                    ["mnist_dense", 32],
                    ["mnist_dense", 64],
                    ["mnist_dense", 4096],
                    ["cifar10_cnn", None],
                ]
            },
            "tf32-on-cpu": {"spec": mnist_spec("tf32", "fit")},
            "cuda": {"spec": mnist_spec("float32", "fit", device="cuda")},
            "mps": {"spec": mnist_spec("float32", "fit", device="mps")},
            "unknown-loop": {"spec": mnist_spec("float32", "keras_loop")},
        }
    },
    "failures": {
        "initial_loss_scale": 2.0**24,
        "requests": {
            "overflow-custom-mixed_float16": {
                "spec": mnist_spec("mixed_float16", "custom", max_steps=16)
            },
            "nan-fit-float32": {
                "spec": mnist_spec("float32", "fit", max_steps=4),
                "nan_logits": True,
            },
            "nan-custom-mixed_float16": {
                "spec": mnist_spec("mixed_float16", "custom", max_steps=4),
                "nan_logits": True,
            },
        },
    },
}
SPECS = {
    name: request["spec"]
    for job in JOBS.values()
    for name, request in job["requests"].items()
    if "spec" in request
}


# The jobs whose stderr is asserted (test_tensorflow_logs_stay_out_of_the_terminal): each a
# new interpreter, so that TensorFlow's import, and whatever it prints, happens in the cell.
NEW_INTERPRETER = ("fit-float32", "custom-mixed_float16")

# One process imports what a TensorFlow cell imports, as mpbench's fork server does, then
# forks each job in turn: the fork runs CHILD with its stdout and stderr in files of its own.
FORKS = r"""
import json, os, sys
from mpbench.runner.launchers.zygote import preload

preload("tensorflow")
jobs, folder = json.loads(sys.argv[1]), sys.argv[2]
ended = {}
for index, job in enumerate(jobs):
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            for fd, name in ((1, "out"), (2, "err")):
                target = os.open(f"{folder}/{index}.{name}", os.O_WRONLY | os.O_CREAT)
                os.dup2(target, fd)
                os.close(target)
            source = job.get("code", CHILD)  # a job's own code, or cells (CHILD)
            exec(compile(source, "<child>", "exec"), {"__name__": "__main__", "JOB": job})
            code = 0
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    ended[index] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
print(json.dumps(ended))
"""


def _environment() -> dict[str, str]:
    # Hide any GPU so that the cells run, and are asserted, on the CPU. TF_CPP_MIN_LOG_LEVEL
    # is left unset: keeping TensorFlow's logs quiet is the backend's job.
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def _results(job: dict[str, Any], code: int, stdout: str, stderr: str) -> dict[str, Any]:
    lines = [line for line in stdout.splitlines() if line.startswith(RESULT)]
    if code != 0 or not lines:
        crash = f"exit {code}\n{stdout[-2000:]}\n{stderr[-4000:]}"
        return {name: {"crash": crash} for name in job["requests"]}
    results = json.loads(lines[-1][len(RESULT) :])
    results.update({f"stderr:{name}": stderr for name in job["requests"]})
    return results


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    """`job` in a new interpreter of its own."""
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(job)],
        capture_output=True,
        text=True,
        timeout=300,
        env=_environment(),
    )
    return _results(job, proc.returncode, proc.stdout, proc.stderr)


def fork_jobs(jobs: list[dict[str, Any]], folder: Path) -> dict[str, Any]:
    """Each of `jobs` in a fork of its own, of one process that imported TensorFlow."""
    proc = subprocess.run(
        [sys.executable, "-c", f"CHILD = {CHILD!r}\n{FORKS}", json.dumps(jobs), str(folder)],
        capture_output=True,
        text=True,
        timeout=600,
        env=_environment(),
    )
    try:
        ended = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        ended = {}
    results: dict[str, Any] = {}
    for index, job in enumerate(jobs):
        if str(index) not in ended:
            crash = f"forks: exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
            results.update(
                {name: {"crash": crash} for name in job.get("requests", [job.get("name")])}
            )
            continue
        out, err = ((folder / f"{index}.{name}").read_text() for name in ("out", "err"))
        if "code" in job:
            results[job["name"]] = {"returncode": ended[str(index)], "stdout": out, "stderr": err}
            continue
        results.update(_results(job, ended[str(index)], out, err))
    return results


@pytest.fixture(scope="module")
def tf_cells(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for name in NEW_INTERPRETER:
        results.update(run_job(JOBS[name]))
    forked = [job for name, job in JOBS.items() if name not in NEW_INTERPRETER]
    forked.append({"name": "optimizer-check", "code": OPTIMIZER_CHECK})
    results.update(fork_jobs(forked, tmp_path_factory.mktemp("tf_forks")))
    return results


def finished(tf_cells: dict[str, Any], name: str) -> dict[str, Any]:
    result = tf_cells[name]
    assert "crash" not in result, result["crash"]
    assert "error" not in result, f"{result['error']}: {result['message']}"
    return result


def refused(tf_cells: dict[str, Any], name: str, error: str) -> str:
    result = tf_cells[name]
    assert "crash" not in result, result["crash"]
    assert result.get("error") == error, result
    return result["message"]


@pytest.mark.parametrize("loop", ["fit", "custom"])
@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16", "mixed_float16"])
def test_cell_trains_and_reports(tf_cells: dict[str, Any], loop: str, policy: str) -> None:
    result = finished(tf_cells, f"{loop}-{policy}")
    m = result["measurements"]
    spec = SPECS[f"{loop}-{policy}"]
    total = spec["max_steps"] or EPOCHS * STEPS_PER_EPOCH
    assert len(m["step_times_s"]) == total
    assert m["warmup_steps"] == 2
    assert all(t > 0 for t in m["step_times_s"])
    assert m["samples_per_step"] == BATCH
    # The end-to-end window: whole epochs, about as many steps as were timed one by one.
    e2e = m["end_to_end"]
    timed = total - 2
    assert e2e["steps"] == -(-timed // STEPS_PER_EPOCH) * STEPS_PER_EPOCH
    assert e2e["seconds"] > 0
    assert e2e["samples_per_s"] == pytest.approx(e2e["steps"] * BATCH / e2e["seconds"])
    if loop == "fit":  # what a Keras user passes: arrays and a batch size, shuffled
        assert e2e["input_pipeline"].startswith("NumPy arrays passed to fit(x, y, batch_size=64")
    else:
        assert "custom tf.function step" in e2e["input_pipeline"]
    grand_total = total + e2e["steps"]
    assert result["progress"][:total] == [[step, grand_total] for step in range(1, total + 1)]
    assert result["progress"][-1] == [grand_total, grand_total]
    # Training memory: this process's RSS sampled while the synced steps ran (a CPU).
    memory = m["memory"]
    assert memory["training_source"] == "process anonymous RSS sampled"
    assert memory["samples"] >= 2
    assert memory["training_peak_bytes"] >= memory["training_start_bytes"] > 0
    assert (
        memory["training_bytes"] == memory["training_peak_bytes"] - memory["training_start_bytes"]
    )
    assert memory["dataset_device_bytes"] == TRAIN * 784 * 4 + TRAIN * 8  # float32 x, int64 y
    assert m["threads"]["intra_op"] is not None
    assert result["warnings"] == []
    assert m["test_accuracy"] > 0.5  # 10 balanced classes: chance is 0.1
    assert 0 < m["test_loss"] < m["epoch_losses"][0]
    assert len(m["epoch_losses"]) == EPOCHS  # with CUT, the last epoch is a short one
    assert m["epoch_losses"] == sorted(m["epoch_losses"], reverse=True)
    assert m["data"]["name"] == "synthetic-mnist"
    assert m["data"]["train_size"] == TRAIN
    assert m["framework_version"].startswith("tensorflow 2.")
    assert " / keras 3." in m["framework_version"]
    assert m["memory"]["host_peak_rss_bytes"] > 0
    assert m["memory"]["device_peak_allocated_bytes"] is None  # CPU
    assert m["device"]["kind"] == "cpu"
    extra = m["extra_config"]
    # The optimizer settings are the runner's to record (from the spec); the backend checks
    # the built Keras optimizer against them and fails the cell otherwise.
    assert "optimizer" not in extra
    assert extra["loop"] == loop


@pytest.mark.parametrize("cell", ["fit-float32", "custom-mixed_float16"])
def test_tensorflow_logs_stay_out_of_the_terminal(tf_cells: dict[str, Any], cell: str) -> None:
    finished(tf_cells, cell)
    # Run alone in its process, the cell is all that could write to stderr: TensorFlow's
    # start-up banner (oneDNN, CUDA stubs, CPU features) and XLA's notes must not appear.
    assert tf_cells[f"stderr:{cell}"] == ""


@pytest.mark.parametrize("loop", ["fit", "custom"])
def test_max_steps_cuts_the_last_epoch_short(tf_cells: dict[str, Any], loop: str) -> None:
    m = finished(tf_cells, f"{loop}-mixed_bfloat16")["measurements"]
    assert len(m["step_times_s"]) == CUT < EPOCHS * STEPS_PER_EPOCH


@pytest.mark.parametrize("loop", ["fit", "custom"])
@pytest.mark.parametrize(
    ("policy", "compute"),
    [("float32", "float32"), ("mixed_bfloat16", "bfloat16"), ("mixed_float16", "float16")],
)
def test_effective_precision_is_read_back(
    tf_cells: dict[str, Any], loop: str, policy: str, compute: str
) -> None:
    state = finished(tf_cells, f"{loop}-{policy}")["measurements"]["precision"]
    assert state["dtype_policy"] == policy
    assert state["compute_dtype"] == compute
    assert state["variable_dtype"] == "float32"
    assert state["output_dtype"] == "float32"
    # TensorFlow's default is TF32 on; every one of these policies must turn it off.
    assert state["tf32_enabled"] is False
    assert state["loss_scaling"] is (policy == "mixed_float16")
    assert state["loop"] == loop
    assert state["jit_compile"] is SPECS[f"{loop}-{policy}"]["jit"]
    assert state["tensorflow_version"].startswith("2.")


@pytest.mark.parametrize("loop", ["fit", "custom"])
def test_float16_reports_its_loss_scale(tf_cells: dict[str, Any], loop: str) -> None:
    m = finished(tf_cells, f"{loop}-mixed_float16")["measurements"]
    assert m["precision"]["loss_scale_initial"] == 2.0**15
    assert m["loss_scale"]["final_scale"] == 2.0**15  # no overflow, no growth in 96 steps
    assert m["loss_scale"]["skipped_steps"] == 0
    for other in ("float32", "mixed_bfloat16"):
        assert finished(tf_cells, f"{loop}-{other}")["measurements"]["loss_scale"] is None


def test_overflowing_float16_steps_are_skipped_and_counted(tf_cells: dict[str, Any]) -> None:
    m = finished(tf_cells, "overflow-custom-mixed_float16")["measurements"]
    skipped = m["loss_scale"]["skipped_steps"]
    assert 0 < skipped < 16
    # Each skipped step halves the scale; growth needs 2000 clean steps.
    assert m["loss_scale"]["final_scale"] == 2.0**24 / 2**skipped
    assert len(m["step_times_s"]) == 16


def test_custom_loop_records_xla(tf_cells: dict[str, Any]) -> None:
    m = finished(tf_cells, "custom-mixed_float16")["measurements"]
    assert m["extra_config"]["jit_compile"] is True


def test_cifar10_cnn_trains_a_few_steps(tf_cells: dict[str, Any]) -> None:
    m = finished(tf_cells, "cifar10_cnn")["measurements"]
    assert len(m["step_times_s"]) == 5
    assert m["data"]["name"] == "synthetic-cifar10"
    assert m["params"] == get_workload("cifar10_cnn").param_count()
    assert all(loss > 0 for loss in m["epoch_losses"])


def test_parameter_count_matches_the_workload(tf_cells: dict[str, Any]) -> None:
    counts = tf_cells["params"]
    assert "crash" not in counts, counts["crash"]
    assert len(counts) == 4
    for workload, units, keras_count in counts:
        assert keras_count == get_workload(workload).param_count(units), (workload, units)
    m = finished(tf_cells, "fit-float32")["measurements"]
    assert m["params"] == get_workload("mnist_dense").param_count(UNITS)


@pytest.mark.parametrize("cell", ["nan-fit-float32", "nan-custom-mixed_float16"])
def test_non_finite_loss_is_diverged(tf_cells: dict[str, Any], cell: str) -> None:
    assert refused(tf_cells, cell, "CellDiverged") == "non-finite loss (nan) at step 1"


def test_cells_it_cannot_run_are_unsupported(tf_cells: dict[str, Any]) -> None:
    reason = refused(tf_cells, "tf32-on-cpu", "Unsupported")
    assert "compute capability >= 8.0" in reason
    # The test hides every GPU (CUDA_VISIBLE_DEVICES=""), as on a CPU-only build.
    assert refused(tf_cells, "cuda", "Unsupported") == (
        "TensorFlow sees no GPU (CPU-only build?): pip install 'tensorflow[and-cuda]'"
    )
    assert "mps" in refused(tf_cells, "mps", "Unsupported")
    assert "keras_loop" in refused(tf_cells, "unknown-loop", "Unsupported")


# Reads back RMSprop and Adam (plain and loss-scaled) as Keras built them; a fork of its own
# (tf_cells' forks).
OPTIMIZER_CHECK = """
import dataclasses
import keras
from mpbench.backends.tensorflow import models
from mpbench.workloads import get_workload
for name in ("mnist_dense", "cifar10_cnn"):
    spec = get_workload(name).optimizer
    built = models.build_optimizer(spec)
    models.check_optimizer(built, spec)
    models.check_optimizer(keras.optimizers.LossScaleOptimizer(built), spec)
    print(models.optimizer_settings(built))
wrong = dataclasses.replace(get_workload("mnist_dense").optimizer, learning_rate=0.5)
try:
    models.check_optimizer(models.build_optimizer(get_workload("mnist_dense").optimizer), wrong)
except RuntimeError as exc:
    print("refused:", exc)
"""


def test_the_built_keras_optimizer_is_checked_against_the_spec(tf_cells: dict[str, Any]) -> None:
    """Run in a child: reads back RMSprop and Adam (plain and loss-scaled) as Keras built them."""
    ran = tf_cells["optimizer-check"]
    assert "crash" not in ran, ran["crash"]
    assert ran["returncode"] == 0, ran["stderr"]
    out = ran["stdout"]
    assert "'optimizer': 'rmsprop'" in out and "'rho': 0.9" in out
    assert "'optimizer': 'adam'" in out and "'beta_2': 0.999" in out
    assert "refused: Keras built learning_rate=" in out and "asks for 0.5" in out
