"""`mpbench data`, run as a real subprocess against private caches."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import data_formats as formats
from cli import run_mpbench

# The autouse fixture points MPBENCH_CACHE, HOME and KERAS_HOME at tmp_path; a new
# interpreter each time, and a terminal wide enough for the table.
WIDE = {"COLUMNS": "200"}


def test_json_reports_found_and_missing(tmp_path: Path, homes) -> None:
    formats.write_mnist_npz(tmp_path / "mine" / "mnist.npz", formats.random_mnist())
    formats.write_cifar_py(homes.keras / "cifar-10-batches-py-target", formats.random_cifar())
    result = run_mpbench(
        "data", "--json", "--data-dir", str(tmp_path / "mine"), cwd=tmp_path, env=WIDE, fork=False
    )
    assert result.returncode == 0, result.stderr
    report = {d["dataset"]: d for d in json.loads(result.stdout)["datasets"]}
    assert set(report) == {"mnist", "cifar10"}
    mnist, cifar = report["mnist"], report["cifar10"]
    assert (mnist["found"], mnist["place"], mnist["format"]) == (True, "data-dir", "mnist.npz")
    assert mnist["path"] == str(tmp_path / "mine" / "mnist.npz")
    assert (cifar["found"], cifar["place"], cifar["format"]) == (
        True,
        "keras cache",
        "cifar-python",
    )
    assert mnist["searched"] == [str(tmp_path / "mine"), str(homes.datasets), str(homes.keras)]


def test_json_missing_dataset_has_a_fetch_hint(tmp_path: Path, homes) -> None:
    result = run_mpbench("data", "--json", cwd=tmp_path, env=WIDE, fork=False)
    assert result.returncode == 0, result.stderr
    report = {d["dataset"]: d for d in json.loads(result.stdout)["datasets"]}
    mnist = report["mnist"]
    assert mnist["found"] is False and mnist["path"] is None
    assert mnist["download_to"] == str(homes.datasets / "mnist.npz")
    assert mnist["url"] in mnist["fetch_hint"] and mnist["sha256"] in mnist["fetch_hint"]
    assert "sha256sum -c" in mnist["fetch_hint"]


def test_format_json_and_its_alias_json_print_the_same_bytes(tmp_path: Path, homes) -> None:
    formats.write_mnist_npz(tmp_path / "mine" / "mnist.npz", formats.random_mnist())
    mine = ("--data-dir", str(tmp_path / "mine"))
    printed = {
        " ".join(args): run_mpbench("data", *mine, *args, cwd=tmp_path, env=WIDE)
        for args in [("--format", "json"), ("--json",), ("--format", "table"), ()]
    }
    assert all(done.returncode == 0 for done in printed.values()), printed
    report = {d["dataset"]: d for d in json.loads(printed["--format json"].stdout)["datasets"]}
    assert report["mnist"]["found"] is True
    assert printed["--json"].stdout == printed["--format json"].stdout
    assert printed["--format table"].stdout == printed[""].stdout
    assert "MNIST" in printed[""].stdout


def test_canonical_sources_are_published_ones(tmp_path: Path) -> None:
    # A fresh process (no monkeypatching) reports the canonical URLs and digests.
    result = run_mpbench("data", "--json", cwd=tmp_path, env=WIDE, fork=False)
    report = {d["dataset"]: d for d in json.loads(result.stdout)["datasets"]}
    assert report["mnist"]["url"] == (
        "https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz"
    )
    assert report["mnist"]["sha256"].startswith("731c5ac602752760")
    assert report["cifar10"]["url"] == "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz"
    assert report["cifar10"]["sha256"].startswith("c4a38c50a1bc5f3a")


def test_table_output(tmp_path: Path, homes) -> None:
    formats.write_mnist_idx(homes.datasets / "MNIST" / "raw", formats.random_mnist(), gz=True)
    result = run_mpbench("data", cwd=tmp_path, env=WIDE, fork=False)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "MNIST" in out and "found" in out and "mpbench cache" in out and "idx" in out
    assert "CIFAR-10" in out and "missing" in out
    assert "To fetch it on a machine with network access" in out
    assert "curl -fL" in out


def test_missing_data_dir_is_exit_2_one_line(tmp_path: Path) -> None:
    result = run_mpbench(
        "data", "--data-dir", str(tmp_path / "nope"), cwd=tmp_path, env=WIDE, fork=False
    )
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert "does not exist" in result.stderr and "Traceback" not in result.stderr


def test_status_module_imports_no_framework_or_pandas(tmp_path: Path) -> None:
    code = (
        "import sys, mpbench.data.status; "
        "print(sorted(m for m in ('pandas', 'torch', 'tensorflow', 'keras') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip() == "[]"
