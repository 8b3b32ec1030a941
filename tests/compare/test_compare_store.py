"""`mpbench compare` reads a results store (mpbench store add, docs/history.md) as it reads run
directories: the same report from the same records, with filters by device, workload, policy
and, for a store's runs, commit range and date; the same run from a store and its directory
counted once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from builders import cpu_run, write_run
from cli import run_mpbench

from mpbench.compare import CompareOptions
from mpbench.compare.run import compare, load
from mpbench.errors import InvalidInput
from mpbench.results import write_environment
from mpbench.results.commits import attach_commits
from mpbench.results.store import Store, read_run_dir

COMMITS = ["1111111aaaa", "2222222bbbb", "3333333cccc"]


def _run(root: Path, index: int) -> Path:
    run_id = f"20260301-10{index:02d}00-run{index}"
    directory = root / f"run-{index}"
    write_run(directory, cpu_run(run_id))
    started = f"2026-03-0{index + 1}T10:00:00+00:00"
    write_environment(directory, {"started_at": started, "git_commit": COMMITS[index]})
    (directory / "run.json").write_text(json.dumps({"run_id": run_id, "config": {}}))
    return directory


@pytest.fixture
def runs(tmp_path: Path) -> tuple[Path, list[Path]]:
    directories = [_run(tmp_path, i) for i in range(3)]
    store = tmp_path / "store.sqlite"
    found = [run for directory in directories for run in read_run_dir(directory)]
    attach_commits(found, None, None, None)  # environment.json's, as `mpbench store add` does
    with Store.create(store) as db:
        for run in found:
            db.add(run)
    return store, directories


def _json(*paths: Path, **options) -> dict:
    out = Path(options.pop("output"))
    code = compare(CompareOptions(paths=list(paths), format="json", output=out, **options))
    assert code == 0
    return json.loads(out.read_text())


def test_a_store_compares_as_its_run_directories_do(runs, tmp_path):
    store, directories = runs
    from_store = _json(store, output=tmp_path / "a.json")
    from_dirs = _json(*directories, output=tmp_path / "b.json")
    assert from_store["cells"] == from_dirs["cells"]
    # three commits of one machine are a history: its newest run is read, and the report
    # says which and what it left out
    assert from_store["runs"] == from_dirs["runs"] == ["20260301-100200-run2"]
    (note,) = [n for n in from_store["notes"] if "newest run only" in n]
    assert "20260301-100200-run2 (commit 3333333c" in note and "2 older runs" in note
    pooled = _json(store, output=tmp_path / "c.json", pool=True)
    assert len(pooled["runs"]) == 3
    assert any("3 runs of 3 commits" in n and "pooled" in n for n in pooled["notes"])
    # the same runs from the store and their directories are read once
    assert load([store, *directories], pool=True) == load([store], pool=True)


def test_filters_choose_records_and_a_stores_runs(runs, tmp_path):
    store, directories = runs
    chosen = load([store], CompareOptions(workloads=("mnist_dense",), policies=("float32",))
                  .record_filter())  # fmt: skip
    assert chosen and {(r.workload, r.policy) for r in chosen} == {("mnist_dense", "float32")}
    middle = load([store], CompareOptions(commits="2222222..2222222").record_filter())
    assert {r.run_id for r in middle} == {"20260301-100100-run1"}
    since = load([store], CompareOptions(since="2026-03-02").record_filter())
    assert {r.run_id for r in since} == {"20260301-100100-run1", "20260301-100200-run2"}
    assert {r.workload for r in load(directories, CompareOptions(workloads=("cifar10_cnn",))
                                     .record_filter())} == {"cifar10_cnn"}  # fmt: skip
    # run directories take the run filters too, by the commits their environment.json names
    later = load(directories, CompareOptions(commits="2222222..").record_filter())
    assert {r.run_id for r in later} == {"20260301-100100-run1", "20260301-100200-run2"}
    with pytest.raises(InvalidInput, match="no run of commit '4444444'"):
        load(directories, CompareOptions(commits="4444444..").record_filter())


def test_the_command_line_filters_and_refuses_in_one_line(runs):
    store, _ = runs
    shown = run_mpbench("compare", store, "-w", "mnist_dense", "-p", "fp32", "-p", "bf16")
    assert shown.returncode == 0, shown.stderr
    assert "mnist_dense" in shown.stdout and "cifar10_cnn" not in shown.stdout
    nothing = run_mpbench("compare", store, "--device", "h200")
    assert nothing.returncode == 2
    assert nothing.stderr.strip() == (
        "mpbench: error: no record passes --device, --workload, --policy and the run filters"
    )
    bad = run_mpbench("compare", store, "-p", "fp12")
    assert bad.returncode == 2 and "--policy: unknown policy 'fp12'" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_a_baseline_never_holds_the_run_compared(runs, tmp_path):
    """Issue 55: a store the run was added to as it finished held it as its own newest run,
    and `compare RUN --baseline STORE` gated the run against itself (+0.0 %, PASS)."""
    store, directories = runs
    newest = "20260301-100200-run2"
    report = _json(directories[2], baseline=store, output=tmp_path / "a.json", max_slowdown=0.1)
    assert report["runs"] == [newest]
    assert report["baseline_runs"] == ["20260301-100100-run1"]  # the run before it
    assert (
        f"the baseline store holds {newest}, the run compared: left out of the baseline"
        in report["notes"]
    )
    # A baseline that does not hold the run is read as it was, without the note.
    both = _json(directories[2], baseline=directories[1], output=tmp_path / "b.json")
    assert not any("left out of the baseline" in n for n in both["notes"])


@pytest.mark.parametrize("kind", ["store", "run directory", "results file"])
def test_a_baseline_of_only_the_run_compared_is_one_line(runs, tmp_path, kind):
    _, directories = runs
    run = directories[2]
    if kind == "store":
        baseline = tmp_path / "only.sqlite"
        found = read_run_dir(run)
        attach_commits(found, None, None, None)
        with Store.create(baseline) as db:
            for stored in found:
                db.add(stored)
    else:
        baseline = run if kind == "run directory" else run / "results.jsonl"
    said = run_mpbench("compare", run, "--baseline", baseline, "--max-slowdown", "10%")
    assert said.returncode == 2, said.stdout
    assert said.stderr.strip() == (
        f"mpbench: error: --baseline {baseline} holds only 20260301-100200-run2, the run "
        "compared: nothing to compare against"
    )


# Two machines whose fingerprints share the 12 characters the tables show, and a third.
TWINS = ("9f3c2a7b41d06e85", "9f3c2a7b41d0ffff")
OTHER = "0a1b2c3d4e5f6071"


@pytest.fixture
def three_machines(tmp_path: Path) -> Path:
    """A store (made by `mpbench store add`) of one run on each of three machines."""
    directories = []
    for index, fingerprint in enumerate((*TWINS, OTHER)):
        directory = tmp_path / f"machine-{index}"
        write_run(directory, cpu_run(f"20260301-10{index:02d}00-m{index}", fingerprint=fingerprint))
        directories.append(directory)
    store = tmp_path / "fleet.sqlite"
    added = run_mpbench("store", "add", *directories, "--store", store)
    assert added.returncode == 0, added.stderr
    return store


def _fingerprints(store: Path, *filters: str) -> set[str]:
    out = store.parent / "report.json"
    done = run_mpbench("compare", store, *filters, "--format", "json", "-o", out)
    assert done.returncode == 0, done.stderr
    return {cell["hardware_fingerprint"] for cell in json.loads(out.read_text())["cells"]}


def test_device_takes_the_fingerprint_as_the_tables_show_it(three_machines):
    """Issue 55: `--device` took only the whole 16-hex fingerprint, not the 12 every table
    shows (`no record passes --device ...`)."""
    store = three_machines
    table = run_mpbench("compare", store, "-w", "mnist_dense").stdout
    shown = f"[{OTHER[:12]}]"
    assert f"mnist_dense on cpu: AMD EPYC {shown}" in table
    assert _fingerprints(store, "--device", OTHER[:12]) == {OTHER}
    assert _fingerprints(store, "--device", OTHER.upper()) == {OTHER}
    assert _fingerprints(store, "--device", TWINS[1][:13]) == {TWINS[1]}
    history = run_mpbench("history", store, "--device", OTHER[:12], "-w", "mnist_dense")
    assert history.returncode == 0, history.stderr
    assert f"mnist_dense on cpu: AMD EPYC {shown}" in history.stdout  # as compare names it
    assert not any(f"[{twin[:12]}]" in history.stdout for twin in TWINS)


@pytest.mark.parametrize("command", ["compare", "history"])
def test_a_fingerprint_prefix_of_several_machines_or_too_short_is_one_line(three_machines, command):
    store = three_machines
    ambiguous = run_mpbench(command, store, "--device", TWINS[0][:12])
    assert ambiguous.returncode == 2
    assert ambiguous.stderr == (
        f"mpbench: error: --device {TWINS[0][:12]}: the fingerprints of 2 machines start with "
        f"it: {TWINS[0]} (cpu: AMD EPYC), {TWINS[1]} (cpu: AMD EPYC); give more of the one "
        "you mean\n"
    )
    short = run_mpbench(command, store, "--device", OTHER[:6])
    assert short.returncode == 2
    assert short.stderr == (
        f"mpbench: error: --device {OTHER[:6]}: too short to name a fingerprint; give at least "
        f"its first 12 characters, as the tables show them ({OTHER[:12]})\n"
    )
