"""`mpbench detect` for real on this machine, in subprocesses, as a user runs it."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from cli import run_mpbench
from rich.console import Console

from mpbench.detect import collect
from mpbench.detect.cpu import X86_FLAGS
from mpbench.detect.render import print_report, report_json

PROC_CPUINFO = Path("/proc/cpuinfo")


def this_cpu() -> dict:
    """What /proc/cpuinfo here says, read independently of mpbench."""
    if not PROC_CPUINFO.exists():
        pytest.skip("no /proc/cpuinfo on this platform")
    text = PROC_CPUINFO.read_text()
    lines = text.splitlines()

    def value(key: str) -> str | None:
        found = (line.split(":", 1)[1] for line in lines if line.split(":")[0].strip() == key)
        return next((v.strip() for v in found), None)

    flags = set((value("flags") or value("Features") or "").split())
    return {
        "model": value("model name"),
        "flags": flags,
        "logical": sum(1 for line in lines if line.split(":")[0].strip() == "processor"),
        "x86": value("flags") is not None,
    }


def nvml_sees_gpus() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return False
    try:
        return pynvml.nvmlDeviceGetCount() > 0
    finally:
        pynvml.nvmlShutdown()


def test_json_run_on_this_machine():
    done = run_mpbench("detect", "--format", "json", fork=False)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    cpu = this_cpu()
    assert data["schema_version"] == 1
    assert data["probed"] is False
    if cpu["model"]:
        assert data["cpu"]["model"] == cpu["model"]
    assert data["cpu"]["logical_cores"] == cpu["logical"]
    if cpu["x86"]:
        for flag in X86_FLAGS:
            assert data["cpu"]["flags"][flag] is (flag in cpu["flags"]), flag

    cpu_device = next(d for d in data["devices"] if d["kind"] == "cpu")
    ratings = {r["policy"]: r["rating"] for r in cpu_device["ratings"]}
    native_bf16 = bool({"avx512_bf16", "amx_bf16"} & cpu["flags"])
    assert ratings["mixed_bfloat16"] == ("fast" if native_bf16 else "slow")
    assert ratings["tf32"] == "unsupported"
    if native_bf16:
        assert cpu_device["recommendation"]["policy"] == "mixed_bfloat16"

    if not nvml_sees_gpus():
        assert data["gpus"] == []
        assert not any(d["kind"] == "cuda" for d in data["devices"])
        assert any("NVIDIA" in note or "nvidia" in note for note in data["notes"])
    for fw in data["frameworks"]:
        expected = None
        with contextlib.suppress(metadata.PackageNotFoundError):
            expected = metadata.version(fw["distribution"] or fw["name"])
        assert fw["version"] == expected
        assert fw["probe"] is None


def test_table_run_on_this_machine():
    done = run_mpbench("detect", fork=False)
    assert done.returncode == 0, done.stderr
    cpu = this_cpu()
    out = done.stdout
    if cpu["model"]:
        assert cpu["model"] in out
    if cpu["x86"]:
        for flag in ("avx512_bf16", "avx512_fp16", "amx_bf16"):
            row = next(line for line in out.splitlines() if f"│ {flag} " in line)
            assert ("yes" if flag in cpu["flags"] else "no") in row.split("│")[2]
    if not nvml_sees_gpus():
        assert "NVIDIA GPUs: none found" in out
    assert "Precision policies" in out and "Recommendation" in out


def test_detect_imports_no_framework_and_no_pandas():
    code = (
        "import json, sys\n"
        "from mpbench.cli import main\n"
        "rc = main(['detect', '--json'])\n"
        "heavy = ['torch', 'tensorflow', 'keras', 'pandas', 'jax']\n"
        "print('LOADED', json.dumps([m for m in heavy if m in sys.modules]))\n"
        "sys.exit(rc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.splitlines()[-1].removeprefix("LOADED "))
    assert loaded == []
    # and the report itself was printed before that line
    assert json.loads("\n".join(done.stdout.splitlines()[:-1]))["cpu"]["model"]


@pytest.mark.parametrize(
    ("args", "option"),
    [(["detect", "--bogus"], "--bogus"), (["detect", "--format", "xml"], "--format")],
)
def test_bad_options_exit_2_with_one_line(args, option):
    done = run_mpbench(*args, fork=False)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("mpbench: error:") and option in lines[0]
    assert "Traceback" not in done.stderr


def test_format_json_and_its_alias_json_print_the_same_bytes(fake_nvml, monkeypatch):
    """`--format json` is the report's JSON, and `--json` (kept for scripts) the same bytes;
    `--format table` the table the command prints by default. One report for every run, so
    that nothing but the option differs (a fork of this process inherits the patch)."""
    fake_nvml("A100")
    report = collect(environ={})
    monkeypatch.setattr("mpbench.detect.collect", lambda **_: report)
    printed = {
        " ".join(args): run_mpbench("detect", *args)
        for args in [("--format", "json"), ("--json",), ("--format", "table"), ()]
    }
    assert all(done.returncode == 0 for done in printed.values()), printed
    assert printed["--format json"].stdout == report_json(report) + "\n"
    assert printed["--json"].stdout == printed["--format json"].stdout
    assert printed["--format table"].stdout == printed[""].stdout
    assert "Precision policies" in printed[""].stdout


def test_rendering_is_literal_text(fake_nvml):
    """Names and notes are printed as they are, never read as rich markup."""
    fake_nvml("A100")
    report = collect(environ={})
    report.notes.append("tensorflow 2.18.0: pip install 'tensorflow[and-cuda]'")
    console = Console(record=True, width=160)
    print_report(report, console=console)
    text = console.export_text()
    assert "pip install 'tensorflow[and-cuda]'" in text
    assert "NVIDIA A100-SXM4-80GB" in text
    assert json.loads(report_json(report))["notes"][-1].endswith("'tensorflow[and-cuda]'")


def test_report_api_by_label(fake_nvml):
    fake_nvml("T4")
    report = collect(environ={})
    assert report.device("cuda:0") is report.device("cuda", 0)
    assert report.device("cpu").label == "cpu"
    assert report.device_traits("mps") is None
    fingerprint = report.hardware_fingerprint("cuda", 0)
    assert len(fingerprint) == 16 and int(fingerprint, 16) >= 0
    assert report.to_dict()["devices"][0]["fingerprint"] == fingerprint
