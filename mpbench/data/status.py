"""`mpbench data`: which datasets mpbench finds, where, and how to fetch the missing ones.

Only looks at names on disk (fast, reads no data); `mpbench run` validates the contents.
Imports neither pandas nor any framework.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict, dataclass
from pathlib import Path

from mpbench.data.dataset import DATASETS, LABELS
from mpbench.data.download import source
from mpbench.data.locate import find_in, places
from mpbench.data.locations import datasets_dir


@dataclass
class DatasetStatus:
    dataset: str  # "mnist" | "cifar10"
    found: bool
    place: str | None  # "data-dir" | "mpbench cache" | "keras cache"; None when missing
    path: str | None  # the file or folder that would be read
    format: str | None  # "mnist.npz", "idx", "cifar-binary", "cifar-python", "tar.gz"
    searched: list[str]  # folders looked in, in order
    url: str  # the canonical file (or the $MPBENCH_<DATASET>_URL mirror)
    sha256: str  # its published SHA-256
    download_to: str  # where `mpbench run` would download it
    fetch_hint: str  # a shell command for a machine with network access


def collect_status(data_dir: Path | None) -> list[DatasetStatus]:
    searched = places(data_dir)
    out = []
    for dataset in DATASETS:
        found = next((hit for hit in (find_in(dataset, place) for place in searched) if hit), None)
        src = source(dataset)
        dest = datasets_dir() / src.file_name
        out.append(
            DatasetStatus(
                dataset=dataset,
                found=found is not None,
                place=found.place.label if found else None,
                path=str(found.path) if found else None,
                format=found.format if found else None,
                searched=[str(place.path) for place in searched],
                url=src.url,
                sha256=src.sha256,
                download_to=str(dest),
                fetch_hint=fetch_hint(src.url, src.sha256, dest),
            )
        )
    return out


def fetch_hint(url: str, sha256: str, dest: Path) -> str:
    """A command that fetches and verifies the file, to run where there is network access
    (then copy the file to the same place on the offline machine)."""
    target = shlex.quote(str(dest))
    return (
        f"curl -fL --create-dirs -o {target} {shlex.quote(url)} && "
        f"echo {shlex.quote(f'{sha256}  {dest}')} | sha256sum -c -"
    )


def status_json(statuses: list[DatasetStatus]) -> str:
    return json.dumps({"datasets": [asdict(s) for s in statuses]}, indent=2)


def print_status(statuses: list[DatasetStatus]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title="Datasets", title_justify="left")
    for column in ("dataset", "status", "where", "format", "path"):
        table.add_column(column, overflow="fold")
    for s in statuses:
        status = "[green]found[/green]" if s.found else "[yellow]missing[/yellow]"
        table.add_row(LABELS[s.dataset], status, s.place or "-", s.format or "-", s.path or "-")
    console.print(table)
    if statuses:
        console.print("Searched, in order: " + ", ".join(statuses[0].searched), highlight=False)
    for s in statuses:
        if s.found:
            continue
        console.print(
            f"\n{LABELS[s.dataset]} is missing: `mpbench run` downloads it when online; "
            "without network it uses a synthetic stand-in (--data auto) or fails (--data "
            "real). To fetch it on a machine with network access and copy it here:",
            highlight=False,
        )
        console.print(f"  {s.fetch_hint}", markup=False, highlight=False, soft_wrap=True)
