"""The fleet's options and rules that need no cluster: what --on, --fleet and
--fleet-timeout accept, one line and exit 2 for the rest, before any cluster is asked; which
modules may import Ray or submitit; the versions warning."""

from __future__ import annotations

import ast
import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest
from builders import run_options
from cli import run_mpbench

from mpbench.errors import InvalidInput
from mpbench.fleet import driver
from mpbench.fleet.machines import FleetMachine
from mpbench.fleet.node import run_environment
from mpbench.fleet.options import DEFAULT_TIMEOUT_S, fleet_options
from mpbench.runner.loop import Warnings

PACKAGE = Path(__file__).resolve().parents[2] / "mpbench"


def test_a_ray_address_comes_from_the_option_or_the_environment(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert fleet_options("ray", None, None, None).address == "auto"
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")
    assert fleet_options("ray", None, None, None).address == "10.0.0.5:6379"
    given = fleet_options("ray://head:10001", "H100, A100,H100", "90s", None)
    assert given.address == "ray://head:10001"
    assert given.kinds == ("H100", "A100")  # spaces and repeats dropped, order kept
    assert given.timeout_s == 90.0
    assert fleet_options("slurm", None, None, None).timeout_s == DEFAULT_TIMEOUT_S
    assert fleet_options(None, None, None, None) is None  # a local run


@pytest.mark.parametrize(
    "on, fleet, timeout, fragment",
    [
        ("kubernetes", None, None, "--on 'kubernetes': must be ray, ray://HOST:PORT or slurm"),
        ("ray://head", None, None, "a Ray client address is ray://HOST:PORT"),
        ("ray", "H100,,A100", None, "an empty machine kind"),
        ("ray", "H100;rm -rf", None, "is no machine kind"),
        ("ray", None, "soon", "--fleet-timeout 'soon': must be seconds"),
        ("ray", None, "0", "must be above 0 seconds"),
        (None, "H100", None, "--fleet: only with --on ray|slurm"),
        (None, None, "10m", "--fleet-timeout: only with --on ray|slurm"),
    ],
)
def test_bad_fleet_options_are_refused(on, fleet, timeout, fragment):
    with pytest.raises(InvalidInput, match=".*".join(map(_escaped, fragment.split("*")))):
        fleet_options(on, fleet, timeout, None)


def _escaped(text: str) -> str:
    import re

    return re.escape(text)


def test_the_cli_says_a_bad_fleet_option_in_one_line_before_any_cluster(tmp_path):
    done = run_mpbench("run", *run_options(), "--store", tmp_path / "s.sqlite", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == "mpbench: error: --store: only with --on ray|slurm (a fleet run)"
    done = run_mpbench("run", *run_options(), "--on", "ray", "--repeat", "0", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "--repeat" in done.stderr  # the configuration is checked before Ray is asked
    assert not list(tmp_path.glob("results*")), "nothing is written for bad input"


def test_without_ray_installed_the_fleet_is_one_line_naming_the_extra(tmp_path):
    blocker = tmp_path / "blocked" / "ray"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('No module named ray')\n")
    env = {
        **os.environ,
        "PYTHONPATH": f"{blocker.parent}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    }
    done = subprocess.run(
        [sys.executable, "-m", "mpbench", "run", *run_options(), "--on", "ray"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        "mpbench: error: --on ray needs Ray, which is not installed: pip install 'mpbench[ray]'"
    )


def _imports(path: Path) -> set[str]:
    """The top-level packages a module imports, by statement or by name
    (`import_engine("ray", ...)`, `importlib.import_module("ray")`)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in (
            "import_engine",
            "import_module",
        ):
            if node.args and isinstance(node.args[0], ast.Constant):
                names.add(str(node.args[0].value).split(".")[0])
        elif isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_only_the_fleet_engines_import_ray_or_submitit():
    importers = {
        name: sorted(
            str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if name in _imports(p)
        )
        for name in ("ray", "submitit")
    }
    assert importers == {"ray": ["fleet/ray_engine.py"], "submitit": ["fleet/slurm_engine.py"]}
    # and `mpbench run` without --on reaches the fleet only through cli.py's branch
    cli = (PACKAGE / "cli.py").read_text()
    assert "from mpbench.fleet import run_fleet" in cli
    assert not any("mpbench.fleet" in (PACKAGE / p).read_text() for p in ("runner/loop.py",))


def test_each_engine_keeps_the_driver_s_protocol():
    # No type checker runs in CI: the driver types its engine as FleetEngine, and each engine
    # (the test stand-in too) has each of its methods, by the same parameter names, and sets
    # each of its attributes.
    from local_fleet import LocalFleet

    from mpbench.fleet.engine import FleetEngine
    from mpbench.fleet.ray_engine import RayFleet
    from mpbench.fleet.slurm_engine import SlurmFleet

    methods = {
        name: list(inspect.signature(member).parameters)
        for name, member in vars(FleetEngine).items()
        if inspect.isfunction(member) and not name.startswith("_")
    }
    assert {"run", "fleet_kinds", "stop"} <= set(methods)
    for engine in (RayFleet, SlurmFleet, LocalFleet):
        kept = {
            name: list(inspect.signature(getattr(engine, name)).parameters)
            for name in methods
            if callable(getattr(engine, name, None))
        }
        assert kept == methods, engine.__name__
        source = ast.parse(inspect.getsource(engine))
        assigned = {
            target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", None)
            for node in ast.walk(source)
            if isinstance(node, (ast.Assign, ast.AnnAssign))
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        }
        assert set(FleetEngine.__annotations__) <= assigned, engine.__name__


class _Engine:
    """Answers the driver's questions as a cluster whose kinds run other versions."""

    engine = "fake"

    def __init__(self, facts):
        self._facts = facts
        self.options = fleet_options("ray", None, "5", None)

    def facts(self, fleet_kinds):
        return {kind: self._facts.get(kind) for kind in fleet_kinds}


def test_machines_on_other_versions_are_warned_about_and_a_silent_kind_is_no_node(tmp_path, capsys):
    machines = [FleetMachine(k, tmp_path / k, f"r-{k}") for k in ("H100", "A100", "L4")]
    engine = _Engine(
        {
            "H100": {"mpbench": "0.1.0", "torch": "2.6.0+cu124", "python": "3.11.7"},
            "A100": {"mpbench": "0.1.0", "torch": "2.5.1+cu121", "python": "3.11.7"},
        }
    )
    driver._check_versions(engine, machines, Warnings())
    warned = capsys.readouterr().err
    assert "the machines run different torch versions (H100 2.6.0+cu124, A100 2.5.1+cu121)" in (
        " ".join(warned.split())
    )
    assert "mpbench versions" not in warned and "python versions" not in warned
    assert [m.status for m in machines] == ["waiting", "waiting", "no node"]
    assert "no node of kind L4 answered within --fleet-timeout (5 s)" in machines[2].why


class _Failing(_Engine):
    """A cluster whose node-side code raises, then one whose node is lost with none left."""

    def __init__(self, error=None):
        super().__init__({})
        self.error = error

    def run(self, machine, seed, receive):
        if self.error is not None:
            raise self.error
        machine.why = "Task failed because the node it was running on is dead"
        return False

    def has_node(self, fleet_kind):
        return False


def test_a_machine_whose_node_side_fails_or_is_lost_is_said_and_the_others_go_on(tmp_path):
    said = []
    failing = FleetMachine("H100", tmp_path / "H100", "r-H100")
    driver._serve(_Failing(ValueError("while reading\nno such file")), failing, None, said.append)
    assert failing.status == "failed" and failing.why == "ValueError: no such file"
    lost = FleetMachine("A100", tmp_path / "A100", "r-A100")
    driver._serve(_Failing(), lost, None, lambda m, text: said.append(text))
    assert lost.status == "lost"
    assert lost.why == (
        "its node was lost (Task failed because the node it was running on is dead) and no "
        "node of kind A100 is left"
    )
    assert said == []  # no retry was announced: no node of the kind was left


@pytest.mark.parametrize(
    "node_env, name",
    [
        ({}, "A100"),  # not named: the kind names the machine
        ({"MPBENCH_MACHINE": " "}, "A100"),  # empty is unnamed, as machine.py reads it
        ({"MPBENCH_MACHINE": "ib-cluster"}, "ib-cluster"),  # a name the site gave wins
    ],
)
def test_a_kind_names_its_machine_unless_the_node_is_named(node_env, name):
    env = run_environment("A100", {"PATH": "/usr/bin", **node_env})
    assert env == {"PATH": "/usr/bin", "MPBENCH_MACHINE": name}


class _RayStandIn:
    """ray.init and ray.shutdown as a client sees them when the head's client server loses
    the process it started for this client: ConnectionAbortedError with Ray's own words
    (ray/util/client/worker.py, `_server_init`), then a connection that works."""

    def __init__(self, *failures: Exception) -> None:
        self.failures = list(failures)
        self.calls: list[str] = []

    def init(self, **_: object) -> None:
        self.calls.append("init")
        if self.failures:
            raise self.failures.pop(0)

    def shutdown(self) -> None:
        self.calls.append("shutdown")


def _connect(monkeypatch, address: str, ray: _RayStandIn) -> None:
    from types import SimpleNamespace

    from mpbench.fleet import ray_engine

    monkeypatch.setattr(ray_engine, "_check_answers", lambda *_: None)  # no socket dialled
    monkeypatch.setattr(ray_engine, "_quiet", lambda _: None)
    fleet = ray_engine.RayFleet.__new__(ray_engine.RayFleet)  # no Ray imported here
    fleet.options, fleet.ray = SimpleNamespace(address=address), ray
    fleet.connect()


_INIT_FAILED = "Initialization failure from server:\nTraceback (most recent call last): ..."


def test_a_ray_client_whose_server_process_died_at_its_start_connects_again(monkeypatch):
    # ray-project/ray#63202: each connection gets a new server process on the head.
    ray = _RayStandIn(ConnectionAbortedError(_INIT_FAILED), ConnectionAbortedError(_INIT_FAILED))
    _connect(monkeypatch, "ray://127.0.0.1:10001", ray)
    assert ray.calls == ["init", "shutdown", "init", "shutdown", "init"]
    # Three refusals in a row are the cluster's answer, said in one line.
    ray = _RayStandIn(*[ConnectionAbortedError(_INIT_FAILED)] * 3)
    with pytest.raises(InvalidInput, match=r"no Ray cluster at ray://.*Initialization failure"):
        _connect(monkeypatch, "ray://127.0.0.1:10001", ray)
    assert ray.calls.count("init") == 3
    # Anything else, or an address that is not a Ray client's, is said at once.
    for address, failure in [
        ("ray://127.0.0.1:10001", ConnectionError("ray client connection timeout")),
        ("127.0.0.1:6379", ConnectionAbortedError(_INIT_FAILED)),
    ]:
        ray = _RayStandIn(failure)
        with pytest.raises(InvalidInput):
            _connect(monkeypatch, address, ray)
        assert ray.calls == ["init"], address
