"""CPU detection from real /proc/cpuinfo texts of other machines, and without /proc/cpuinfo."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from cli import run_mpbench

from mpbench.detect import collect
from mpbench.detect.cpu import X86_FLAGS, read_cpu


@dataclass(frozen=True)
class Expected:
    stem: str
    model: str
    vendor: str
    architecture: str
    sockets: int | None
    physical: int | None
    logical: int
    present: frozenset[str]  # flags of interest the CPU has; every other one must be False
    ratings: dict[str, str]
    recommendation: str


CASES = [
    Expected(
        "intel_xeon_8481c_sapphire_rapids",
        "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz",
        "GenuineIntel",
        "x86_64",
        1,
        4,
        8,
        frozenset(
            {"amx_bf16", "amx_tile", "amx_int8", "avx512_bf16", "avx512_fp16"}
            | {"avx512_vnni", "avx512f", "avx2"}
        ),
        {
            "float32": "fast",
            "tf32": "unsupported",
            # avx512_fp16 without amx_fp16: slow in torch, and in TensorFlow on any CPU
            "mixed_float16": "slow",
            "mixed_bfloat16": "fast",
            "float8": "emulated",
        },
        "mixed_bfloat16",
    ),
    Expected(
        "amd_epyc_9124_genoa",
        "AMD EPYC 9124 16-Core Processor",
        "AuthenticAMD",
        "x86_64",
        1,
        16,
        32,
        frozenset({"avx512_bf16", "avx512_vnni", "avx512f", "avx2"}),
        {
            "float32": "fast",
            "tf32": "unsupported",
            "mixed_float16": "slow",
            "mixed_bfloat16": "fast",
            "float8": "emulated",
        },
        "mixed_bfloat16",
    ),
    Expected(
        "intel_xeon_e5_2620v4_broadwell_2s",
        "Intel(R) Xeon(R) CPU E5-2620 v4 @ 2.10GHz",
        "GenuineIntel",
        "x86_64",
        2,
        16,
        32,
        frozenset({"avx2"}),
        {
            "float32": "fast",
            "tf32": "unsupported",
            "mixed_float16": "slow",
            "mixed_bfloat16": "slow",
            "float8": "emulated",
        },
        "float32",
    ),
    Expected(
        "aws_graviton2_neoverse_n1",
        "ARM Neoverse-N1",
        "0x41",
        "aarch64",
        None,  # Arm kernels print no socket/core topology
        None,
        4,
        frozenset({"asimdhp"}),
        {
            "float32": "fast",
            "tf32": "unsupported",
            "mixed_float16": "slow",
            "mixed_bfloat16": "slow",
            "float8": "emulated",
        },
        "float32",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.stem)
def test_parses_model_topology_and_flags(case, cpuinfo):
    cpu = read_cpu(cpuinfo(case.stem))
    assert cpu.model == case.model
    assert cpu.vendor == case.vendor
    assert cpu.architecture == case.architecture
    assert (cpu.sockets, cpu.physical_cores, cpu.logical_cores) == (
        case.sockets,
        case.physical,
        case.logical,
    )
    assert set(X86_FLAGS) <= set(cpu.flags)
    assert {name for name, present in cpu.flags.items() if present} == case.present
    assert all(value is False for name, value in cpu.flags.items() if name not in case.present)
    assert cpu.source == str(cpuinfo(case.stem))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.stem)
def test_ratings_and_recommendation(case, cpuinfo, no_gpu):
    report = collect(cpuinfo_path=cpuinfo(case.stem), environ={})
    entry = report.device("cpu")
    assert entry is not None and entry.name == case.model
    assert {r.policy: r.rating.value for r in entry.ratings} == case.ratings
    assert entry.recommendation.policy == case.recommendation
    assert report.device_traits("cpu").cpu_flags == case.present
    for rating in entry.ratings:
        assert rating.reason  # every rating says why


def test_bf16_reason_names_the_flag_that_makes_it_fast(cpuinfo, no_gpu):
    spr = collect(cpuinfo_path=cpuinfo("intel_xeon_8481c_sapphire_rapids"), environ={})
    genoa = collect(cpuinfo_path=cpuinfo("amd_epyc_9124_genoa"), environ={})

    def bf16_reason(report):
        return next(r.reason for r in report.device("cpu").ratings if r.policy == "mixed_bfloat16")

    assert "amx_bf16" in bf16_reason(spr)
    assert "avx512_bf16" in bf16_reason(genoa)


@pytest.mark.parametrize("content", [None, ""], ids=["missing", "empty"])
def test_without_cpuinfo_flags_are_unknown_and_rated_cautiously(content, tmp_path, no_gpu):
    path = tmp_path / "cpuinfo"
    if content is not None:
        path.write_text(content)
    report = collect(cpuinfo_path=path, environ={})
    cpu = report.cpu
    assert cpu.source == "platform"
    assert cpu.model  # from the platform module, never empty
    assert all(value is None for value in cpu.flags.values())
    assert report.device_traits("cpu").cpu_flags is None
    ratings = {r.policy: r.rating.value for r in report.device("cpu").ratings}
    assert ratings == {
        "float32": "fast",
        "tf32": "unsupported",
        "mixed_float16": "slow",
        "mixed_bfloat16": "slow",
        "float8": "emulated",
    }
    assert report.device("cpu").recommendation.policy == "float32"
    assert any("cpuinfo" in note for note in report.notes)
    assert json.loads(json.dumps(report.to_dict()))["cpu"]["flags"]["avx512_bf16"] is None


def test_fingerprint_identifies_the_cpu_not_the_software(cpuinfo, no_gpu, monkeypatch):
    spr = cpuinfo("intel_xeon_8481c_sapphire_rapids")
    first = collect(cpuinfo_path=spr, environ={}).hardware_fingerprint("cpu")
    # A framework upgrade changes the report, not the hardware fingerprint.
    from importlib import metadata

    monkeypatch.setattr(metadata, "version", lambda name: "99.0.0")
    upgraded = collect(cpuinfo_path=spr, environ={})
    assert upgraded.framework("torch").version == "99.0.0"
    assert upgraded.hardware_fingerprint("cpu") == first

    others = {
        collect(cpuinfo_path=cpuinfo(case.stem), environ={}).hardware_fingerprint("cpu")
        for case in CASES
    }
    assert len(others) == len(CASES)
    assert first in others


def test_cpuinfo_override_reaches_a_real_cli_run(cpuinfo):
    path = cpuinfo("intel_xeon_8481c_sapphire_rapids")
    done = run_mpbench("detect", "--json", env={"MPBENCH_CPUINFO": str(path)}, fork=False)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["cpu"]["model"] == "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz"
    assert data["cpu"]["flags"]["amx_bf16"] is True
    assert data["cpu"]["flags"]["amx_fp16"] is False
    cpu = next(d for d in data["devices"] if d["kind"] == "cpu")
    assert "amx_bf16" in cpu["cpu_flags"]
    assert cpu["recommendation"]["policy"] == "mixed_bfloat16"
    assert "equally good" not in cpu["recommendation"]["reason"]
    # Each installed framework's ratings beside the device-level ones (both where none is).
    assert cpu["framework_ratings"] and set(cpu["framework_ratings"]) <= {"torch", "tensorflow"}
    for ratings in [cpu["ratings"], *cpu["framework_ratings"].values()]:
        fp16 = next(r for r in ratings if r["policy"] == "mixed_float16")
        assert fp16["rating"] == "slow" and fp16["source"] == "rule"
