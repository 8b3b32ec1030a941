"""Framework backends. Each lives in its own sub-package and is imported only inside the
child process that runs a cell, so the CLI never pays for importing a framework."""

import importlib
from types import ModuleType

from mpbench.errors import unknown_choice

FRAMEWORKS = ("torch", "tensorflow")
# The distribution that must be installed for each framework, and how to get it.
INSTALL_HINTS = {
    "torch": "pip install 'mpbench[torch]'",
    "tensorflow": "pip install 'mpbench[tensorflow]'",
}


def get_backend(framework: str) -> ModuleType:
    """The backend module; it provides `run_cell(spec, progress, warn) -> Measurements`."""
    if framework not in FRAMEWORKS:
        raise unknown_choice("framework", framework, [*FRAMEWORKS, "all"])
    return importlib.import_module(f"mpbench.backends.{framework}.backend")
