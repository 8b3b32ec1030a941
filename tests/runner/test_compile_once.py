"""A cell compiles at most once (issue 42, item 1): a torch float8 cell compiles by default
(torchao's float8 training is meant to run under torch.compile), so with `--compile
--also-eager` its eager cell trained, compiled and timed what its compiled cell did: fp8
compiled twice, as two cells. The matrix now holds it once, as the compiled cell beside the
other policies' compiled ones; with --fp8-eager both fp8 cells run, each its own way."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from cli import run_mpbench
from rich.console import Console

from mpbench.backends.torch.fp8 import fp8_compiled
from mpbench.compare import print_run_summary
from mpbench.policies import POLICIES, DeviceTraits
from mpbench.results.io import read_records
from mpbench.runner.config import RunOptions, build_config
from mpbench.runner.matrix import expand

QUICK = Path(__file__).resolve().parents[2] / "configs" / "quick.toml"
ALSO_EAGER_RUN = Path(__file__).with_name("fixtures") / "also_eager_run"
EPYC = DeviceTraits("cpu", "AMD EPYC", cpu_flags=frozenset({"avx512_bf16", "avx512f"}))


class _Report:
    gpus = ()

    def device_traits(self, kind, index=None):
        return EPYC if kind == "cpu" else None


def _cells(**options):
    defaults = dict(
        config=QUICK,
        frameworks=["torch"],
        workloads=["mnist_dense"],
        policies=["bf16", "fp8"],
        device="cpu",
        repeat=1,
        fp8_eager=False,  # the default (configs/quick.toml runs its float8 cells eager)
    )
    _, _, cells = expand(build_config(RunOptions(**{**defaults, **options})), _Report(), "run")
    return cells


def _ids(cells) -> list[str]:
    return [c.spec.cell_id.removeprefix("torch/mnist_dense/").removesuffix("/r0") for c in cells]


def _compiles(spec) -> bool:
    """Whether the cell's model runs under torch.compile (backends/torch/backend.py's rule)."""
    return bool(spec.compile or (POLICIES[spec.policy].fp8 and fp8_compiled(spec)))


def test_also_eager_runs_the_float8_cell_once_compiled():
    cells = _cells(compile=[False, True])
    assert _ids(cells) == ["mixed_bfloat16", "mixed_bfloat16@compiled", "float8@compiled"]
    fp8 = cells[-1].spec
    assert fp8.compile and _compiles(fp8)


def test_with_fp8_eager_both_float8_cells_run_each_its_own_way():
    cells = _cells(compile=[False, True], fp8_eager=True)
    assert _ids(cells) == [
        "mixed_bfloat16",
        "mixed_bfloat16@compiled",
        "float8",
        "float8@compiled",
    ]
    assert [_compiles(c.spec) for c in cells] == [False, True, False, True]


@pytest.mark.parametrize(
    ("compile_axis", "expected"),
    [([False], "float8"), ([True], "float8@compiled")],
)
def test_one_compile_value_keeps_the_cell_ids_of_earlier_runs(compile_axis, expected):
    # The float8 cell without --compile compiles too, under the id it always had.
    assert _ids(_cells(policies=["fp8"], compile=compile_axis)) == [expected]


@pytest.mark.parametrize("fp8_eager", [False, True])
@pytest.mark.parametrize("compile_axis", [[False], [True], [False, True]])
def test_no_two_cells_of_a_matrix_train_the_same(compile_axis, fp8_eager):
    cells = _cells(policies=["all"], compile=compile_axis, fp8_eager=fp8_eager, accumulate=["1,2"])
    trained = [dataclasses.replace(c.spec, cell_id="", compile=_compiles(c.spec)) for c in cells]
    assert len(trained) == len(set(map(repr, trained))), _ids(cells)


def test_a_data_parallel_float8_cell_keeps_its_scaling_reference():
    cells = _cells(policies=["fp8"], compile=[False, True], nproc=["1,2"])
    ids = {c.spec.cell_id for c in cells}
    parallel = [c for c in cells if c.spec.nproc == 2]
    assert parallel and all(c.scaling_reference in ids for c in parallel)


def test_a_tiny_also_eager_run_compiles_float8_once_and_compare_never_says_add_compile(
    capsys: pytest.CaptureFixture[str],
):
    """On a committed run of `--compile --also-eager` (fixtures/README.md has its command):
    what the run recorded, its closing table (the function `mpbench run` prints it with) and
    compare. Compiling its two cells took ~10 s of CPU in every CI; what a compiled fp8 cell
    records is tested live by tests/backends/test_torch_fp8.py's CLI run, and which cells
    this command runs by the matrix tests above, checked here against the committed run."""
    records = read_records(ALSO_EAGER_RUN / "results.jsonl")
    cell_ids = sorted(r.cell_id for r in records)
    assert cell_ids == [
        "torch/mnist_dense/float8@compiled/r0",
        "torch/mnist_dense/mixed_bfloat16/r0",
        "torch/mnist_dense/mixed_bfloat16@compiled/r0",
    ]
    # Today's matrix for that command: the committed run is still the one it would make.
    assert sorted(f"torch/mnist_dense/{i}/r0" for i in _ids(_cells(compile=[False, True]))) == (
        cell_ids
    )
    fp8 = [r for r in records if r.policy == "float8"]
    assert len(fp8) == 1 and fp8[0].compile is not None and fp8[0].fp8.compiled
    print_run_summary(records, Console(width=200, force_terminal=False), 1.0)
    closing_table = capsys.readouterr().out
    assert "fp8" in closing_table and "add --compile" not in closing_table
    compared = run_mpbench("compare", ALSO_EAGER_RUN, "--format", "json")
    assert compared.returncode == 0, compared.stderr
    assert "add --compile" not in compared.stdout
