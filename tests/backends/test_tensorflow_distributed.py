"""TensorFlow data-parallel cells: MirroredStrategy over logical CPUs (docs/distributed.md).

Logical CPUs must be configured before TensorFlow's runtime starts, so every training here
runs in a fresh process: the real CLI, or one interpreter calling run_cell (the strategy's
cells first, before anything initialises the runtime). Two logical CPUs on two shared cores
test the plumbing and the arithmetic, never a speed.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

import pytest
from builders import cell_spec
from processes import finished, selected_tests, stop

from mpbench.backends.base import Unsupported
from mpbench.backends.tensorflow import device as tf_device

if importlib.util.find_spec("tensorflow") is None:
    pytest.skip("TensorFlow is not installed", allow_module_level=True)

# two logical replicas: a core each
pytestmark = [pytest.mark.tensorflow, pytest.mark.all_cores]

CONFIG = """
[run]
data = "synthetic"
warmup_steps = 2
repeat = 1
timeout = 240

[workloads.mnist_dense]
batch_size = 64
epochs = 1
max_steps = 12
units = 32
synthetic_train_size = 2048
synthetic_test_size = 512
"""


class Run:
    """A process started in the background, its output read once it ends."""

    def __init__(self, args: list[str]) -> None:
        self.process = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def done(self, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return finished(self.process, timeout)


class CliRun(Run):
    def __init__(self, tmp_path: Path, name: str, *extra: str) -> None:
        config = tmp_path / "tf_dist.toml"
        config.write_text(CONFIG)
        self.out = tmp_path / name
        super().__init__([
            sys.executable, "-m", "mpbench", "run", "--config", str(config), "-f", "tensorflow",
            "-w", "mnist_dense", "--device", "cpu", "--out", str(self.out), *extra,
        ])  # fmt: skip

    def result(self) -> tuple[subprocess.CompletedProcess, dict]:
        done = self.done()
        assert done.returncode == 0, done.stdout + done.stderr
        lines = (self.out / "results.jsonl").read_text().splitlines()
        return done, {r["cell_id"]: r for r in map(json.loads, lines)}


def selected(request: pytest.FixtureRequest, key) -> set:
    """`key(item)` of each of this module's tests that this session runs (not deselected)."""
    return {key(item) for item in selected_tests(request)} - {None}


# Which process each test reads (None: none).
PROCESS = {
    "test_two_logical_replicas_train_and_are_recorded": "ok",
    "test_xla_with_a_strategy_is_skipped_with_the_reason": "jit",
    "test_several_nodes_are_skipped_with_the_reason": "nodes",
    "test_two_replicas_train_as_one_device_with_the_global_batch": "child",
}


def process_of(item: pytest.Item):
    name = getattr(item, "originalname", None)
    if name == "test_float8_trains_emulated_on_two_logical_replicas":
        return item.callspec.params["loop"]
    return PROCESS.get(name)


@pytest.fixture(scope="module")
def started(request, tmp_path_factory) -> Iterator[dict[str, Run]]:
    """The processes of this module's tests that this session runs, started at once when the
    first of them asks: each imports TensorFlow (seconds, on one core) and they are
    independent, so their imports and trainings overlap instead of following each other.
    Each test waits for its own process and asserts on it alone (its output folder is its
    own)."""

    # Each CLI run's options after the module's own (CliRun).
    options = {
        "ok": "-p fp32 -p bf16 --nproc 2 --grad-comm bf16 --accumulate 1,2",
        "fit": "-p fp8 --nproc 2 --loop fit",
        "custom": "-p fp8 --nproc 2 --loop custom",
        "jit": "-p fp32 --nproc 2 --jit on",
        "nodes": "-p fp32 --nproc 2 --nnodes 2 --rdzv-endpoint 127.0.0.1:29555",
    }

    def start(name: str) -> Run:
        if name == "child":
            return Run([sys.executable, "-c", CHILD, json.dumps(GLOBAL_BATCH_REQUESTS)])
        return CliRun(tmp_path_factory.mktemp(name), name, *options[name].split())

    wanted = selected(request, process_of)
    runs: dict[str, Run] = {}
    try:
        for name in ("ok", "child", "fit", "custom", "jit", "nodes"):
            if name in wanted:
                runs[name] = start(name)
        yield runs
    finally:
        stop(run.process for run in runs.values())


@pytest.mark.slow
def test_two_logical_replicas_train_and_are_recorded(started):
    # -p fp32 -p bf16 --nproc 2 --grad-comm bf16 --accumulate 1,2 (the fixture's)
    done, found = started["ok"].result()
    assert "plumbing, not scaling" in done.stdout + done.stderr  # logical CPUs share cores
    ids = {
        "float32": "tensorflow/mnist_dense/float32@np2/r0",
        "mixed_bfloat16": "tensorflow/mnist_dense/mixed_bfloat16@np2/r0",
    }
    # --grad-comm marks torch cells only: a TensorFlow cell id has no @comm-bf16.
    assert set(found) == set(ids.values()) | {
        "tensorflow/mnist_dense/float32@acc2@np2/r0",
        "tensorflow/mnist_dense/mixed_bfloat16@acc2@np2/r0",
    }
    for policy, cell in ids.items():
        record = found[cell]
        assert record["status"] == "ok", record["reason"]
        assert record["config"]["world_size"] == 2 and record["config"]["nproc_per_node"] == 2
        assert record["precision"]["replicas"] == 2
        assert record["precision"]["replica_devices"] == ["/CPU:0", "/CPU:1"]
        assert record["precision"]["dtype_policy"] == policy
        dist = record["distributed"]
        assert (dist["world_size"], dist["nodes"], dist["nproc_per_node"]) == (2, 1, 2)
        assert dist["launcher"] == "tf.distribute.MirroredStrategy"
        assert dist["backend"] == "CollectiveAllReduce (RING)"
        assert (dist["grad_comm"], dist["devices"]) == ("fp32", "logical")
        assert dist["rank_step_median_s"] == [] and dist["allreduce_s_per_step"] is None
        assert set(dist["unavailable"]) == {"rank_step_median_s", "allreduce_s_per_step"}
        # 12 steps, 2 of them warm-up; each one global step of 2 x 64 samples.
        steps = record["step_time"]
        assert steps["count"] == 10 and steps["warmup_steps"] == 2
        samples_per_step = record["throughput_samples_per_s"] * steps["median_s"]
        assert samples_per_step == pytest.approx(128)
        assert dist["per_device_samples_per_s"] == pytest.approx(
            record["throughput_samples_per_s"] / 2
        )
        assert record["end_to_end"]["samples_per_s"] > 0
        assert 0.0 <= record["accuracy"]["test_accuracy"] <= 1.0
    # Keras' gradient accumulation cannot run under the strategy: skipped, with the reason.
    for policy in ids:
        skipped = found[f"tensorflow/mnist_dense/{policy}@acc2@np2/r0"]
        assert skipped["status"] == "skipped"
        assert "gradient accumulation under MirroredStrategy" in skipped["reason"]


@pytest.mark.slow
@pytest.mark.parametrize("loop", ["fit", "custom"])
def test_float8_trains_emulated_on_two_logical_replicas(started, loop):
    """The float8 layers' scales and amax histories are trainable variables that the
    optimizer overwrites (overwrite_with_gradient): under the strategy too, in both loops."""
    _, found = started[loop].result()  # -p fp8 --nproc 2 --loop <loop>
    (record,) = found.values()
    assert record["cell_id"] == "tensorflow/mnist_dense/float8@np2/r0"
    assert record["status"] == "ok", record["reason"]
    assert record["precision"]["replicas"] == 2
    fp8 = record["fp8"]
    assert fp8["mode"] == "emulated" and fp8["layers_fp8"] == ["dense", "dense_1"]
    assert 0.9 < fp8["flop_share_fp8"] < 1.0  # the 10-class head stays in bfloat16
    assert record["accuracy"]["test_accuracy"] > 0.2  # 10 classes: above chance, it learnt


# slow: its process starts with the module's others, so its own time can read 0 s
@pytest.mark.slow
def test_xla_with_a_strategy_is_skipped_with_the_reason(started):
    _, found = started["jit"].result()  # -p fp32 --nproc 2 --jit on
    (record,) = found.values()
    assert record["status"] == "skipped"
    assert "XLA" in record["reason"] and "MirroredStrategy" in record["reason"]
    assert record["distributed"] is None


# slow: its process starts with the module's others, so its own time can read 0 s
@pytest.mark.slow
def test_several_nodes_are_skipped_with_the_reason(started):
    # -p fp32 --nproc 2 --nnodes 2 --rdzv-endpoint 127.0.0.1:29555
    _, found = started["nodes"].result()
    (record,) = found.values()
    assert record["cell_id"] == "tensorflow/mnist_dense/float32@np2@nodes2/r0"
    assert record["status"] == "skipped"
    assert "MultiWorkerMirroredStrategy" in record["reason"]
    assert "keras-team/keras#20585" in record["reason"]


# One interpreter: the two-replica cells first (their logical CPUs are configured before
# the runtime starts), then the same training on one device with the global batch.
CHILD = r"""
import dataclasses, json, sys
from mpbench.backends.base import CellSpec
from mpbench.backends.tensorflow.backend import run_cell

results = []
for request in json.loads(sys.argv[1]):
    warnings = []
    m = run_cell(CellSpec(**request), lambda step, total: None, warnings.append)
    results.append({**dataclasses.asdict(m), "warnings": warnings})
print("MPBENCH_TEST_RESULT " + json.dumps(results))
"""


def spec(**changes) -> dict:
    values = dict(
        framework="tensorflow",
        max_steps=10,
        seed=3,
        synthetic_train_size=1280,
        intra_op_threads=2,
        inter_op_threads=2,
    )
    return asdict(cell_spec(**{**values, **changes}))


# Two replicas at batch 64 and one device at 128, in fit and in the custom loop.
GLOBAL_BATCH_REQUESTS = [
    spec(nproc=2, loop="fit"),
    spec(nproc=2, loop="custom"),
    spec(batch_size=128, loop="fit"),
    spec(batch_size=128, loop="custom"),
]


# slow: its process starts with the module's others, so its own time can read 0 s
@pytest.mark.slow
def test_two_replicas_train_as_one_device_with_the_global_batch(started):
    """N replicas of batch b average their gradients over the global batch: in float32 they
    follow the same trajectory as one device at batch N x b (same init, same batches), in
    fit and in the custom loop (strategy.run + compute_average_loss)."""
    done = started["child"].done(timeout=300)  # CHILD with GLOBAL_BATCH_REQUESTS
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("MPBENCH_TEST_RESULT "))
    fit2, custom2, fit1, custom1 = json.loads(line.removeprefix("MPBENCH_TEST_RESULT "))
    for two, one in ((fit2, fit1), (custom2, custom1)):
        assert two["samples_per_step"] == one["samples_per_step"] == 128
        assert two["distributed"]["world_size"] == 2 and one["distributed"] is None
        assert two["precision"]["replicas"] == 2 and "replicas" not in one["precision"]
        assert len(two["step_times_s"]) == len(one["step_times_s"]) == 10
        # The loss of every training step (one epoch here), to float32 rounding.
        assert two["epoch_losses"] == pytest.approx(one["epoch_losses"], rel=1e-5)
        assert two["test_loss"] == pytest.approx(one["test_loss"], rel=1e-4)
        assert two["test_accuracy"] == pytest.approx(one["test_accuracy"], abs=1 / 256)
    assert fit2["warnings"] == custom2["warnings"] == []
    assert custom2["distributed"]["grad_comm"] == "fp32"
    # The custom loop under the strategy cannot see the step's gradient norm (Keras sums the
    # replicas' gradients inside apply): none recorded, though one device records it.
    assert custom2["telemetry"]["summary"]["grad_norm_median"] is None
    assert custom1["telemetry"]["summary"]["grad_norm_median"] > 0


# --- GPU replicas: only a fake reaches them here (no GPU). The fake keeps tf.config's real
# behaviour: visible devices and memory growth refuse changes once the runtime started, and
# the logical GPUs are the visible ones renumbered from "/device:GPU:0".


class FakeGpus:
    def __init__(self, count: int) -> None:
        self.physical = [
            SimpleNamespace(name=f"/physical_device:GPU:{i}", device_type="GPU")
            for i in range(count)
        ]
        self.visible = list(self.physical)
        self.growth: dict[str, bool] = {}
        self.initialized = False
        self.memory = {f"GPU:{i}": {"current": 0, "peak": 0} for i in range(count)}
        experimental = SimpleNamespace(
            get_device_details=lambda d: {
                "device_name": f"NVIDIA H100 #{self.physical.index(d)}",
                "compute_capability": (9, 0),
            },
            set_memory_growth=self.set_memory_growth,
            reset_memory_stats=lambda name: self.memory[name].update(
                peak=self.memory[name]["current"]
            ),
            get_memory_info=lambda name: dict(self.memory[name]),
        )
        self.config = SimpleNamespace(
            list_physical_devices=lambda kind=None: list(self.physical) if kind == "GPU" else [],
            set_visible_devices=self.set_visible_devices,
            list_logical_devices=self.list_logical_devices,
            experimental=experimental,
        )

    def set_visible_devices(self, devices, device_type=None) -> None:
        if self.initialized:
            raise RuntimeError("Visible devices cannot be modified after being initialized")
        self.visible = list(devices)

    def set_memory_growth(self, device, enable) -> None:
        if self.initialized:
            raise RuntimeError("Physical devices cannot be modified after being initialized")
        self.growth[device.name] = enable

    def list_logical_devices(self, device_type=None) -> list:
        self.initialized = True
        return [SimpleNamespace(name=f"/device:GPU:{i}") for i in range(len(self.visible))]


def test_gpu_replicas_take_gpus_zero_to_n_with_memory_growth():
    tf = FakeGpus(4)
    replicas = tf_device.resolve_replicas(tf, "cuda", 2)
    assert tf.visible == tf.physical[:2]
    assert tf.growth == {"/physical_device:GPU:0": True, "/physical_device:GPU:1": True}
    assert replicas.devices == ("/GPU:0", "/GPU:1") and replicas.kind == "real"
    assert replicas.placement.tf_device == "/GPU:0"
    assert replicas.placement.info.name == "NVIDIA H100 #0"
    assert replicas.placement.compute_capability == (9, 0)


def test_fewer_gpus_than_replicas_is_unsupported():
    with pytest.raises(Unsupported, match="needs a GPU per replica and TensorFlow sees 1 GPU"):
        tf_device.resolve_replicas(FakeGpus(1), "cuda", 2)
    with pytest.raises(Unsupported, match="no GPU"):
        tf_device.resolve_replicas(FakeGpus(0), "cuda", 2)


def test_replica_training_memory_is_the_fullest_gpus():
    tf = FakeGpus(2)
    replicas = tf_device.resolve_replicas(tf, "cuda", 2)
    tf.memory["GPU:1"] = {"current": 100, "peak": 9_000}  # before training: reset away
    meter = tf_device.memory_meter(tf, replicas.placement, replicas.devices)
    tf.memory["GPU:0"] = {"current": 300, "peak": 1_000}
    tf.memory["GPU:1"] = {"current": 200, "peak": 1_500}
    measured = meter.stop()
    assert (measured.start_bytes, measured.peak_bytes) == (100, 1_500)
    assert "highest of 2 replicas" in measured.source
