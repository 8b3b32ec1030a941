"""A policy named explicitly on a device without a fast path for it runs, as asked, and the run
says so in one line before its first cell, in the policy table's own words (issue 41: `-p bf16`
on a CPU without avx512_bf16/amx_bf16 ran 5-15x slower than float32 without a word). `auto`
and `all` say nothing of the kind: `auto` leaves such policies out and names them; `all` asks
for every policy, fast or not. The CPUs are real /proc/cpuinfo files (tests/fixtures/cpuinfo)."""

from __future__ import annotations

from pathlib import Path

from mpbench.detect import collect
from mpbench.runner.config import RunOptions, build_config
from mpbench.runner.matrix import expand
from mpbench.runner.preflight import preflight

ROOT = Path(__file__).resolve().parents[2]
CI = ROOT / "configs" / "ci.toml"
CPUINFO = ROOT / "tests" / "fixtures" / "cpuinfo"
BROADWELL = CPUINFO / "intel_xeon_e5_2620v4_broadwell_2s.txt"  # AVX2 only
GENOA = CPUINFO / "amd_epyc_9124_genoa.txt"  # avx512_bf16, no avx512_fp16 / amx_fp16
BF16_REASON = (
    "no amx_bf16/avx512_bf16 (x86) or bf16 (Arm): bf16 is emulated, usually slower than float32"
)


def said_before_the_first_cell(cpuinfo: Path, **options) -> list[str]:
    """What preflight warns, for configs/ci.toml's torch cells on a machine with that CPU."""
    report = collect(cpuinfo_path=cpuinfo, environ={})
    config = build_config(RunOptions(config=CI, frameworks=["torch"], **options))
    cells = expand(config, report, "run-1")[2]
    said: list[str] = []
    preflight(config, cells, said.append)
    return said


def no_fast_path(said: list[str]) -> list[str]:
    return [line for line in said if line.startswith("-p ")]


def test_bf16_named_on_an_avx2_cpu_is_said_once_in_the_policy_tables_words(fake_nvml):
    fake_nvml()  # NVML, no GPU: the CPU is the device
    said = said_before_the_first_cell(BROADWELL, policies=["fp32", "bf16", "mixed_bfloat16"])
    (line,) = no_fast_path(said)
    assert line.startswith("-p bf16 on Intel(R) Xeon(R) CPU E5-2620 v4")
    assert line.endswith(f": {BF16_REASON} (rated slow); its cells run as asked")


def test_each_slow_policy_named_gets_its_line(fake_nvml):
    fake_nvml()
    said = said_before_the_first_cell(BROADWELL, policies=["fp16", "bf16", "fp8"])
    assert [line.split(" on ")[0] for line in no_fast_path(said)] == [
        "-p fp16",
        "-p bf16",
        "-p fp8",
    ]
    fp8 = no_fast_path(said)[2]
    assert "no CPU has fp8 matrix units" in fp8 and "(rated emulated)" in fp8


def test_a_policy_the_device_runs_fast_gets_no_line(fake_nvml):
    fake_nvml()
    assert no_fast_path(said_before_the_first_cell(GENOA, policies=["fp32", "bf16"])) == []
    (line,) = no_fast_path(said_before_the_first_cell(GENOA, policies=["fp32", "fp16"]))
    assert line.startswith("-p fp16 on AMD EPYC 9124") and "(rated slow)" in line


def test_auto_and_all_get_no_line(fake_nvml):
    fake_nvml()
    auto = said_before_the_first_cell(BROADWELL, policies=["auto"])
    assert no_fast_path(auto) == [] and "leaves out" in auto[0]  # auto names what it left out
    assert no_fast_path(said_before_the_first_cell(BROADWELL, policies=["all"])) == []
    (line,) = no_fast_path(said_before_the_first_cell(BROADWELL, policies=["auto", "bf16"]))
    assert line.startswith("-p bf16 ")


def test_fp8_asked_to_emulate_gets_no_line(fake_nvml):
    fake_nvml()
    said = said_before_the_first_cell(BROADWELL, policies=["fp8"], fp8_mode="emulated")
    assert no_fast_path(said) == []
