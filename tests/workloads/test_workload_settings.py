"""What a run's settings and plan say of user and zoo workloads before anything runs:
`--units` where no workload of the run has a width is refused (a zoo model ignored it and the
record kept it); a user workload's TOML table takes the run's settings and refuses a
built-in's sizes; a zoo model too big for the memory there is refused with the estimate."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from mpbench.errors import InvalidInput
from mpbench.runner import preflight
from mpbench.runner.config import RunOptions, build_config
from mpbench.workloads.user import UserWorkloadInfo

TESTS = Path(__file__).resolve().parents[1]  # user_models.py's folder
FLOAT64 = "user_models:FLOAT64"  # a torch workload of the test suite's (batch 8, 1 epoch)


@pytest.fixture
def in_tests(monkeypatch: pytest.MonkeyPatch) -> None:
    """The working directory the probe imports `user_models` from."""
    monkeypatch.chdir(TESTS)


def test_units_where_no_workload_of_the_run_has_a_width_is_refused(in_tests) -> None:
    with pytest.raises(InvalidInput) as raised:
        build_config(RunOptions(workloads=[FLOAT64], units=999))
    assert str(raised.value) == (
        f"--units 999: {FLOAT64} has no width for it to set ({FLOAT64} builds its own model "
        "and data (its UserWorkload)); --units sets mnist_dense, transformer_lm, "
        "transformer_lm_large only"
    )
    with pytest.raises(InvalidInput, match="--units 64: cifar10_cnn has no width"):
        build_config(RunOptions(workloads=["cifar10_cnn"], units=64))


def test_units_beside_a_builtin_size_the_builtin_and_no_user_workloads_record(in_tests) -> None:
    config = build_config(RunOptions(workloads=["mnist_dense", FLOAT64], units=16))
    assert config.workloads["mnist_dense"].units == 16
    assert config.workloads[FLOAT64].units is None


def _toml(folder: Path, table: str) -> Path:
    path = folder / "run.toml"
    path.write_text(f'[run]\nworkloads = ["{FLOAT64}"]\n\n[workloads."{FLOAT64}"]\n{table}')
    return path


def test_a_user_workloads_table_sets_its_runs_settings(in_tests, tmp_path: Path) -> None:
    config = build_config(RunOptions(config=_toml(tmp_path, "batch_size = 4\nmax_steps = 2\n")))
    settings = config.workloads[FLOAT64]
    # The table's values; epochs the workload's own reference (the probe's).
    assert (settings.batch_size, settings.max_steps, settings.epochs) == (4, 2, 1)


def test_a_user_workloads_table_refuses_a_builtins_sizes(in_tests, tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as raised:
        build_config(RunOptions(config=_toml(tmp_path, "units = 64\n")))
    assert str(raised.value).endswith(
        f'[workloads."{FLOAT64}"] units: sizes a built-in workload only; {FLOAT64} builds its '
        "own model and data (its UserWorkload)"
    )


# --- too big to fit --------------------------------------------------------------------------

GIB = 2**30


def _cells(device: str, nproc: int = 1) -> list[SimpleNamespace]:
    spec = SimpleNamespace(workload="hf:llama?big", device=device, nproc=nproc)
    return [SimpleNamespace(spec=spec, skip_reason=None)]


@pytest.fixture
def big_model(monkeypatch: pytest.MonkeyPatch) -> UserWorkloadInfo:
    """A zoo model of 2**30 parameters under AdamW: 16 GiB at least to train."""
    info = UserWorkloadInfo(
        "hf:llama?big", ["torch"], 8, 1, source={"zoo": "hf"}, params=GIB, optimizer="AdamW",
        optimizer_states=2,
    )  # fmt: skip
    monkeypatch.setattr(preflight, "describe_workload", lambda name: info)
    return info


def test_a_zoo_model_that_fits_runs_and_one_that_cannot_is_refused(
    big_model: UserWorkloadInfo, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(preflight, "available_memory", lambda: 17 * GIB)
    preflight.check_models_fit(_cells("cpu"))  # 16 GiB of 17: it fits
    monkeypatch.setattr(preflight, "available_memory", lambda: 15 * GIB)
    with pytest.raises(InvalidInput) as raised:
        preflight.check_models_fit(_cells("cpu"))
    assert str(raised.value) == (
        "--workload 'hf:llama?big': training it holds at least 16.0 GiB (1,073,741,824 "
        "parameters × 16 bytes: each float32 weight, its gradient and AdamW's 2 states; "
        "activations come on top), more than the 15.0 GiB this machine has available; make the "
        "model smaller"
    )
    # Each replica of --nproc on a CPU holds a copy.
    monkeypatch.setattr(preflight, "available_memory", lambda: 20 * GIB)
    with pytest.raises(InvalidInput, match=r"at least 32.0 GiB .*× 2 replicas of --nproc 2"):
        preflight.check_models_fit(_cells("cpu", nproc=2))


def test_on_a_gpu_the_model_is_held_to_the_gpus_memory(big_model: UserWorkloadInfo) -> None:
    def report(gib: int) -> SimpleNamespace:
        gpu = SimpleNamespace(memory_total_bytes=gib * GIB)
        return SimpleNamespace(gpu_for_cuda_index=lambda index: gpu)

    preflight.check_models_fit(_cells("cuda:0"), report(80))
    with pytest.raises(InvalidInput, match=r"more than the 8.0 GiB cuda:0 has; make the model"):
        preflight.check_models_fit(_cells("cuda:0"), report(8))
    preflight.check_models_fit(_cells("cuda:0"), None)  # no report: the cell will tell
