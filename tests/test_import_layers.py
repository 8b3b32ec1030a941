"""Which way mpbench's imports run (docs/architecture.md, "Layers"), read from the source
with `ast`: nothing is imported, and an import inside a function counts as much as one at
the top of a module (it is an arrow all the same, only a later one)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "mpbench"

# Arrows that still run the wrong way, each with where it goes next; a new one fails.
KNOWN: set[tuple[str, str]] = set()


def _modules() -> dict[str, tuple[Path, bool]]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


@functools.cache  # read once per process: every test asks for the same arrows
def _imports() -> dict[str, set[str]]:
    """Module -> the mpbench modules it imports (a name imported from a package counts as
    its submodule where there is one)."""
    modules = _modules()

    def resolve(name: str) -> str:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name

    edges: dict[str, set[str]] = {}
    for module, (path, is_package) in modules.items():
        here = module if is_package else module.rpartition(".")[0]
        targets = set()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if _dynamic(node):  # importlib.import_module("mpbench.x"), __import__("mpbench.x")
                targets.add(resolve(node.args[0].value))
            elif isinstance(node, ast.Import):
                targets |= {resolve(a.name) for a in node.names if a.name.startswith("mpbench")}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = here
                    for _ in range(node.level - 1):
                        anchor = anchor.rpartition(".")[0]
                    base = f"{anchor}.{base}" if base else anchor
                if base.startswith("mpbench"):
                    for alias in node.names:
                        full = f"{base}.{alias.name}"
                        targets.add(full if full in modules else resolve(base))
        targets |= {resolve(name) for name in _named_modules(tree) if resolve(name) in modules}
        edges[module] = targets - {module}
    return edges


def _named_modules(tree: ast.AST) -> set[str]:
    """In a module that imports by a name it computes (`import_module(module)`), every
    `"module:function"` string that names an mpbench module
    (`"mpbench.compare.render.terminal:render_table"`, a registry's row): what such a call can
    load is in the module's own text, so it counts as an arrow."""
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    computed = any(
        (n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", ""))
        in ("import_module", "__import__")
        and not (n.args and isinstance(n.args[0], ast.Constant))
        for n in calls
    )
    if not computed:
        return set()
    return {
        n.value.partition(":")[0]
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant)
        and isinstance(n.value, str)
        and n.value.startswith("mpbench.")
        and ":" in n.value
        and " " not in n.value
    }


def _dynamic(node: ast.AST) -> bool:
    """A call that imports a module named by a string literal of mpbench's: an arrow as much
    as an import statement (formats.py once dispatched to compare's renderers this way)."""
    if not isinstance(node, ast.Call) or not node.args:
        return False
    name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
    first = node.args[0]
    return (
        name in ("import_module", "__import__")
        and isinstance(first, ast.Constant)
        and isinstance(first.value, str)
        and first.value.startswith("mpbench")
    )


def _arrows(source: str, target: str) -> set[tuple[str, str]]:
    return {
        (module, imported)
        for module, targets in _imports().items()
        for imported in targets
        if _within(module, source) and _within(imported, target)
    }


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_detect_never_imports_telemetry():
    # One direction: telemetry reads the cell's GPU through detect's NVML mapping; the
    # contention counters detect shares with it live in results/contention.py.
    assert _arrows("mpbench.detect", "mpbench.telemetry") == set()


def test_the_runner_never_imports_compare():
    # The cell identity and run.json's adaptive entry both sides use are in results/.
    assert _arrows("mpbench.runner", "mpbench.compare") <= KNOWN


def test_compare_imports_down_its_layers_only():
    # summary first, then the gates and the report, then render and plot: the verdicts and
    # gates once borrowed render/fmt.py's wording of numbers, which now lives in summary/.
    summary, render, plot = (
        "mpbench.compare.summary",
        "mpbench.compare.render",
        "mpbench.compare.plot",
    )
    for lower in (summary, "mpbench.compare.gates", "mpbench.compare.report"):
        assert _arrows(lower, render) == set(), lower
        assert _arrows(lower, plot) == set(), lower
    assert _arrows(render, plot) == set()


def test_settings_never_imports_compare():
    # run's settings read compare's percentages through mpbench/parsers.py, the parsers
    # both commands share; settings.py once imported them from compare/options.py.
    assert _arrows("mpbench.settings", "mpbench.compare") == set()


def test_a_dynamic_import_is_an_arrow_too():
    code = "import importlib\nimportlib.import_module('mpbench.compare.render.terminal')\n"
    (call,) = [n for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Call)]
    assert _dynamic(call)
    # formats.py's old dispatch: the module's name in a table, imported by a variable
    table = (
        "import importlib\nRENDERERS = ('mpbench.compare.render.terminal:render_table',)\n"
        "def render(name):\n    module, _, function = name.partition(':')\n"
        "    return getattr(importlib.import_module(module), function)\n"
    )
    assert _named_modules(ast.parse(table)) == {"mpbench.compare.render.terminal"}


def test_the_format_table_and_the_option_tables_are_leaves():
    # formats.py, the option model (options.py), its tables (result_options.py) and the
    # value parsers (parsers.py) are read by the CLI at start-up: they import no command
    # (compare, history, runner) and nothing that imports numpy.
    edges = _imports()
    assert edges["mpbench.formats"] <= {"mpbench.errors"}
    assert edges["mpbench.parsers"] <= {"mpbench.errors", "mpbench.policies"}
    assert edges["mpbench.options"] <= {"mpbench.formats", "mpbench.parsers"}
    assert edges["mpbench.result_options"] <= {
        "mpbench.errors",
        "mpbench.policies",
        "mpbench.formats",
        "mpbench.options",
        "mpbench.parsers",
    }


def test_history_sits_above_compare_and_results_below_both():
    # history is compare's series view: it uses compare's summary and renderers, never the
    # other way; both read results through results/sources.py.
    assert _arrows("mpbench.compare", "mpbench.history") == set()
    for above in ("mpbench.compare", "mpbench.history", "mpbench.runner", "mpbench.cli"):
        assert _arrows("mpbench.results", above) == set(), above


def test_the_shared_parsers_import_no_command():
    # mpbench/parsers.py sits under options.py, settings.py, compare/ and the CLI, which all
    # read it.
    for above in (
        "mpbench.options",
        "mpbench.settings",
        "mpbench.compare",
        "mpbench.runner",
        "mpbench.cli",
    ):
        assert _arrows("mpbench.parsers", above) == set(), above


def test_telemetry_never_imports_compare_or_the_runner():
    assert _arrows("mpbench.telemetry", "mpbench.compare") == set()
    assert _arrows("mpbench.telemetry", "mpbench.runner") == set()


def _circle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import circle among `edges`' modules (its arrows in order), or None."""
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str] | None:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done or module not in edges:
            return None
        for target in sorted(edges[module]):
            if found := visit(target, [*path, module]):
                return found
        done.add(module)
        return None

    return next((c for m in sorted(edges) if (c := visit(m, []))), None)


def test_the_launchers_import_each_other_without_a_circle():
    edges = _imports()
    launchers = {m: t for m, t in edges.items() if _within(m, "mpbench.runner.launchers")}
    assert _circle(launchers) is None


def test_no_module_of_mpbench_is_in_an_import_circle():
    assert _circle(_imports()) is None


# The main chain (docs/architecture.md, "Layers"), top first: a layer imports the layers
# below it, never one above (the CLI parses, the runner runs cells, a backend trains one).
MAIN_CHAIN = (
    ("mpbench.cli",),
    ("mpbench.runner",),
    ("mpbench.backends",),
    ("mpbench.workloads", "mpbench.policies", "mpbench.data", "mpbench.telemetry"),
)


def _back_up(chain: tuple[tuple[str, ...], ...]) -> set[tuple[str, str]]:
    """The arrows from a layer of `chain` to one above it."""
    return {
        arrow
        for level, layer in enumerate(chain)
        for below in (p for lower in chain[level + 1 :] for p in lower)
        for above in layer
        for arrow in _arrows(below, above)
    }


def test_the_main_chain_imports_down_only():
    assert _back_up(MAIN_CHAIN) == set()


def _parts(package: str) -> dict[str, set[str]]:
    """The arrows between a package's parts (its modules, each subpackage as one part), its
    own __init__ left out (it gathers its parts: an arrow down to each)."""

    def part(module: str) -> str:
        return f"{package}.{module[len(package) + 1 :].split('.')[0]}"

    edges: dict[str, set[str]] = {}
    for module, targets in _imports().items():
        if _within(module, package) and module != package:
            inside = {part(t) for t in targets if _within(t, package) and t != package}
            edges.setdefault(part(module), set()).update(inside - {part(module)})
    return edges


def test_no_two_parts_of_a_package_import_each_other():
    # Inside packages too: a subpackage counts as one part, so a module that imports a
    # subpackage whose modules import it back is a circle (workloads/user.py once imported
    # the zoo, whose resolvers import user.py).
    packages = sorted(m for m, (_, is_package) in _modules().items() if is_package)
    assert {p: c for p in packages if (c := _circle(_parts(p)))} == {}


def test_the_zoo_sits_above_user_py():
    # user.py looks a zoo name up in the registry the zoo fills (user.ZOOS); the zoo builds
    # UserWorkloads. mpbench.workloads imports the zoo's registry, its top, which imports
    # each prefix's resolver by its "module:function" (an arrow too).
    edges = _imports()
    for below in ("mpbench.workloads.user", "mpbench.workloads.spec", "mpbench.workloads.inputs"):
        assert _arrows(below, "mpbench.workloads.zoo") == set(), below
    registry = "mpbench.workloads.zoo.registry"
    assert {m for m, targets in edges.items() if registry in targets} == {"mpbench.workloads"}
    assert {"mpbench.workloads.zoo.hf_route", "mpbench.workloads.zoo.vision"} <= edges[registry]
    assert _arrows("mpbench.workloads.zoo", "mpbench.workloads.user") != set()  # down
