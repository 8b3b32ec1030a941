"""Which policies a run plans, and what it says about the rest: `--policy auto` (the CI
config's `policies = ["auto"]`) runs float32 and the policies rated fast on the device, and
names once, with detect's rating, each one it left out; a policy named explicitly runs even
where it is slow. A policy name is checked where it enters (option, TOML, run.json), and an
option about float8 cells is not called unused when those cells were planned and skipped."""

from __future__ import annotations

import json
import re
from pathlib import Path

from frameworks import needs_tensorflow

from mpbench.cli import main
from mpbench.detect import collect
from mpbench.policies import DeviceTraits, MeasuredStep
from mpbench.runner.config import RunOptions, build_config
from mpbench.runner.matrix import expand, left_out_note
from mpbench.runner.preflight import preflight, unused_settings
from mpbench.runner.rundir import RunState, write_state

ROOT = Path(__file__).resolve().parents[2]
CI = ROOT / "configs" / "ci.toml"
CPUINFO = ROOT / "tests" / "fixtures" / "cpuinfo"
# avx512_bf16 without avx512_fp16 or AMX-FP16 (the tester's CPU): bf16 fast, fp16 slow.
GENOA = CPUINFO / "amd_epyc_9124_genoa.txt"
# AMX-BF16 and avx512_fp16: bf16 and fp16 both fast.
SAPPHIRE_RAPIDS = CPUINFO / "intel_xeon_8481c_sapphire_rapids.txt"
# AVX2 only: no 16-bit policy fast.
BROADWELL = CPUINFO / "intel_xeon_e5_2620v4_broadwell_2s.txt"


class _Report:
    def __init__(self, traits: DeviceTraits) -> None:
        self.traits = traits
        self.gpus = [traits] if traits.kind == "cuda" else []

    def cuda_mapping(self):
        from mpbench.detect.cuda_order import CudaMapping

        return CudaMapping(tuple(self.gpus))

    def device_traits(self, kind: str, index: int | None = None) -> DeviceTraits | None:
        return self.traits if kind == self.traits.kind else None


def ci_plan(cpuinfo: Path, **options):
    """configs/ci.toml's cells (torch) on a machine with that CPU and no GPU."""
    report = collect(cpuinfo_path=cpuinfo, environ={})
    config = build_config(RunOptions(config=CI, frameworks=["torch"], **options))
    return config, expand(config, report, "run-1")[2]


def policies(cells) -> list[str]:
    return list(dict.fromkeys(cell.spec.policy for cell in cells))


def left_out(note: str) -> str:
    """The part of the note that names what was left out."""
    return note.split(" and leaves out ", 1)[1]


def test_the_ci_config_asks_for_the_fast_policies() -> None:
    text = CI.read_text(encoding="utf-8")
    assert re.search(r'^policies = \["auto"\]', text, flags=re.M)
    assert "23-24 s" not in text and "75-80 s" not in text


def test_ci_on_a_cpu_slow_at_fp16_leaves_fp16_out_and_says_why(fake_nvml) -> None:
    fake_nvml()  # NVML, no GPU: the CPU is the device
    config, cells = ci_plan(GENOA)
    assert policies(cells) == ["float32", "mixed_bfloat16"]
    assert len(cells) == 2 * 8 and all(cell.skip_reason is None for cell in cells)
    (note,) = cells.notes
    assert note.startswith("--policy auto runs float32, mixed_bfloat16 in torch (")
    assert "AMD EPYC 9124" in note
    assert "mixed_float16 (slow: rule: no amx_fp16/avx512_fp16: fp16 works but is emulated" in note
    assert "float8 (emulated: " in note and "tf32 (unsupported: " in note
    assert "runs even where it is slow" in note
    # Said once, before the other warnings, by the checks every run goes through.
    said: list[str] = []
    preflight(config, cells, said.append)
    assert said[0] == note and said.count(note) == 1


def test_ci_on_avx512_fp16_without_amx_fp16_leaves_fp16_out(fake_nvml) -> None:
    """Sapphire Rapids: avx512_fp16 but no amx_fp16, where torch's fp16 matmuls ran no faster
    than float32 (and Keras fp16 180× slower): auto runs bf16, not fp16."""
    fake_nvml()
    _, cells = ci_plan(SAPPHIRE_RAPIDS)
    assert policies(cells) == ["float32", "mixed_bfloat16"]
    (note,) = cells.notes
    assert "mixed_bfloat16" not in left_out(note)
    assert "mixed_float16 (slow: rule: avx512_fp16 without amx_fp16: " in left_out(note)
    assert "float8 (emulated: " in left_out(note)


def test_ci_where_a_measured_step_says_fp16_is_fast_keeps_it(fake_nvml) -> None:
    fake_nvml()
    report = collect(cpuinfo_path=SAPPHIRE_RAPIDS, environ={})
    config = build_config(RunOptions(config=CI, frameworks=["torch"]))
    fast = MeasuredStep("torch", "mixed_float16", 1.3, "2026-11-29T10:00:00+00:00")
    cells = expand(config, report, "run-1", [fast])[2]
    assert policies(cells) == ["float32", "mixed_float16", "mixed_bfloat16"]
    (note,) = cells.notes
    assert "mixed_float16" not in left_out(note)


def test_a_slow_policy_named_beside_auto_runs(fake_nvml) -> None:
    fake_nvml()
    _, cells = ci_plan(GENOA, policies=["auto", "fp16"])
    assert policies(cells) == ["float32", "mixed_bfloat16", "mixed_float16"]
    assert all(cell.skip_reason is None for cell in cells)
    note, slow = cells.notes  # what auto left out; fp16, named, runs slowly here
    assert "mixed_float16" not in left_out(note)
    assert slow.startswith("-p fp16 on AMD EPYC 9124") and "(rated slow)" in slow


def test_all_and_named_policies_leave_nothing_out(fake_nvml) -> None:
    fake_nvml()
    _, every = ci_plan(GENOA, policies=["all"])
    assert "mixed_float16" in policies(every) and every.notes == []
    _, named = ci_plan(GENOA, policies=["fp32", "fp16"])
    assert policies(named) == ["float32", "mixed_float16"]
    # nothing left out; fp16 slow here is said by its own note (test_no_fast_path_note.py)
    assert not any(" and leaves out " in note for note in named.notes)


def test_float32_alone_says_the_ratio_gates_have_nothing_to_compare(fake_nvml) -> None:
    fake_nvml()
    _, cells = ci_plan(BROADWELL)
    assert policies(cells) == ["float32"]
    (note,) = cells.notes
    assert "mixed_bfloat16 (slow: " in note and "mixed_float16 (slow: " in note
    assert "--min-speedup and --max-accuracy-delta have nothing to compare it to" in note


def test_a_fast_float8_left_out_says_it_is_opt_in() -> None:
    h100 = DeviceTraits("cuda", "NVIDIA H100", compute_capability=(9, 0))
    note = left_out_note(["auto"], h100)
    assert note is not None
    assert "float8 (fast: rule: fp8 Tensor Cores" in note and "auto never picks float8" in note
    assert "mixed_float16" not in left_out(note) and "tf32" not in left_out(note)


def test_the_plan_keeps_the_order_of_a_list_under_repeat_auto() -> None:
    """expand's Cells are a list: the rounds of --repeat auto still sort outermost."""
    cpu = DeviceTraits("cpu", "CPU", cpu_flags=frozenset({"avx512_bf16"}))
    config = build_config(
        RunOptions(config=CI, frameworks=["torch"], policies=["auto"], repeat="auto")
    )
    cells = expand(config, _Report(cpu), "r")[2]
    repeats = [cell.spec.repeat for cell in cells]
    assert repeats == sorted(repeats) and cells.notes


# --- float8 options: planned and skipped is not unused ---------------------------------------


def test_fp8_mode_hardware_with_fp8_skipped_on_a_cpu_is_not_unused() -> None:
    cpu = DeviceTraits("cpu", "CPU", cpu_flags=frozenset({"avx512_bf16"}))
    options = RunOptions(
        config=CI, frameworks=["torch"], policies=["fp32", "fp8"], fp8_mode="hardware"
    )
    config = build_config(options)
    cells = expand(config, _Report(cpu), "r")[2]
    fp8 = [cell for cell in cells if cell.spec.policy == "float8"]
    assert fp8 and all("--fp8-mode hardware" in cell.skip_reason for cell in fp8)
    assert unused_settings(config, cells) == []
    recipe = build_config(
        RunOptions(
            config=CI,
            frameworks=["torch"],
            policies=["fp32", "fp8"],
            fp8_mode="hardware",
            fp8_recipe="rowwise",
        )
    )
    assert unused_settings(recipe, expand(recipe, _Report(cpu), "r")[2]) == []
    # Without -p fp8 the option does change nothing, and says so.
    config = build_config(
        RunOptions(config=CI, frameworks=["torch"], policies=["fp32"], fp8_mode="hardware")
    )
    (said,) = unused_settings(config, expand(config, _Report(cpu), "r")[2])
    assert said.startswith("--fp8-mode hardware: applies to float8 cells only") and "-p fp8" in said


# --- bad input: one line, exit 2 -------------------------------------------------------------


def refused(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    return lines[0]


def test_run_help_lists_float8(capsys) -> None:
    assert main(["run", "--help"]) == 0
    shown = " ".join(capsys.readouterr().out.replace("│", " ").split())
    assert "mixed_bfloat16|bf16, float8|fp8, auto" in shown


def test_a_negative_time_budget_must_be_above_0(capsys) -> None:
    line = refused(capsys, ["run", "--repeat", "auto", "--time-budget", "-1"])
    assert line == "mpbench: error: --time-budget '-1': must be above 0 seconds"
    line = refused(capsys, ["run", "--repeat", "auto", "--time-budget", "-2m"])
    assert line.endswith("must be above 0 seconds")


def test_an_unknown_policy_is_named_with_where_it_came_from(capsys, tmp_path) -> None:
    line = refused(capsys, ["run", "-p", "fp99"])
    assert line.startswith("mpbench: error: --policy: unknown policy 'fp99'; valid choices: ")
    assert "float8" in line and line.endswith("auto, all")
    config = tmp_path / "bad.toml"
    config.write_text('[run]\npolicies = ["auto", "fp99"]\n', encoding="utf-8")
    line = refused(capsys, ["run", "--config", str(config)])
    assert f"config {config}: [run] policies: unknown policy 'fp99'" in line


def test_an_unknown_policy_in_a_hand_edited_run_json_names_the_file(capsys, tmp_path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    config = build_config(RunOptions(config=CI, frameworks=["torch"]))
    write_state(out, RunState("run-1", "2026-01-01T00:00:00", "mpbench run", "0", config))
    state = out / "run.json"
    raw = json.loads(state.read_text(encoding="utf-8"))
    raw["config"]["policies"] = ["fp99"]
    state.write_text(json.dumps(raw), encoding="utf-8")
    line = refused(capsys, ["run", "--out", str(out), "--resume"])
    assert line.startswith(f"mpbench: error: {state}: config.policies: unknown policy 'fp99'")
    assert not (out / "results.jsonl").exists()


# --- `auto` per framework (issue 54) ---------------------------------------------------------

SPR_FLAGS = collect(cpuinfo_path=SAPPHIRE_RAPIDS, environ={}).device_traits("cpu").cpu_flags
# Granite Rapids-like: AMX-FP16 tiles make fp16 fast in torch; Keras fp16 is slow on any CPU.
GRANITE = DeviceTraits("cpu", "Xeon 6 (Granite Rapids)", cpu_flags=SPR_FLAGS | {"amx_fp16"})


def both_frameworks(traits: DeviceTraits, measured=(), **options):
    config = build_config(
        RunOptions(config=CI, frameworks=["torch", "tensorflow"], workloads=["mnist_dense"],
                   **options)
    )  # fmt: skip
    return expand(config, _Report(traits), "run-1", measured)[2]


def by_framework(cells) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for cell in cells:
        names = found.setdefault(cell.spec.framework, [])
        if cell.spec.policy not in names:
            names.append(cell.spec.policy)
    return found


def test_auto_runs_each_framework_s_fast_policies() -> None:
    cells = both_frameworks(GRANITE)
    assert by_framework(cells) == {
        "torch": ["float32", "mixed_float16", "mixed_bfloat16"],
        "tensorflow": ["float32", "mixed_bfloat16"],
    }
    ids = {cell.spec.cell_id for cell in cells}
    assert "torch/mnist_dense/mixed_float16/r0" in ids  # the ids a run of one framework has
    assert "tensorflow/mnist_dense/mixed_float16/r0" not in ids
    (note,) = cells.notes
    assert note.startswith(
        "--policy auto runs float32, mixed_float16, mixed_bfloat16 in torch; float32, "
        "mixed_bfloat16 in tensorflow (float32 and the policies rated fast there on Xeon 6"
    )
    assert "mixed_float16 in tensorflow (slow: rule: TensorFlow runs fp16 far slower" in note


def test_auto_on_sapphire_rapids_says_why_fp16_is_out_of_both() -> None:
    cells = both_frameworks(DeviceTraits("cpu", "Xeon 8481C", cpu_flags=SPR_FLAGS))
    assert by_framework(cells) == {
        f: ["float32", "mixed_bfloat16"] for f in ("torch", "tensorflow")
    }
    (note,) = cells.notes
    assert note.startswith("--policy auto runs float32, mixed_bfloat16 in torch and tensorflow (")
    fp16 = left_out(note).split("mixed_float16 (", 1)[1]
    assert fp16.startswith("torch: slow: rule: avx512_fp16 without amx_fp16: ")
    assert "; tensorflow: slow: rule: TensorFlow runs fp16 far slower" in fp16


def test_a_measured_step_decides_auto_in_its_framework_only() -> None:
    spr = DeviceTraits("cpu", "Xeon 8481C", cpu_flags=SPR_FLAGS)
    slow_bf16 = MeasuredStep("tensorflow", "mixed_bfloat16", 0.9, "2026-11-29T10:00:00+00:00")
    cells = both_frameworks(spr, [slow_bf16])
    assert by_framework(cells) == {
        "torch": ["float32", "mixed_bfloat16"],
        "tensorflow": ["float32"],
    }
    (note,) = cells.notes
    assert "mixed_bfloat16 in tensorflow (slow: measured 1.11× slower than float32 here " in note


@needs_tensorflow  # the note is of the TensorFlow cells that run
def test_named_policies_still_run_in_every_framework() -> None:
    cells = both_frameworks(GRANITE, policies=["fp32", "fp16"])
    assert by_framework(cells) == {f: ["float32", "mixed_float16"] for f in ("torch", "tensorflow")}
    (slow,) = [n for n in cells.notes if n.startswith("-p ")]
    assert slow.startswith("-p fp16 on Xeon 6 (Granite Rapids): tensorflow: rule: TensorFlow")


def test_run_reads_the_steps_detect_measured_for_its_device(fake_nvml, tmp_path, monkeypatch):
    from mpbench.detect import steps
    from mpbench.runner.matrix import measured_steps_for

    fake_nvml()
    monkeypatch.setenv("MPBENCH_CACHE", str(tmp_path))
    report = collect(cpuinfo_path=SAPPHIRE_RAPIDS, environ={})
    config = build_config(RunOptions(config=CI, frameworks=["torch"], threads=2))
    entry = {
        "ok": True,
        "measured_at": "2026-11-29T10:00:00+00:00",
        "cache_key": steps.cache_key("torch", "cpu", threads=2),
        "policies": {"mixed_float16": {"speedup": 1.5}},
    }
    steps.store(report.hardware_fingerprint("cpu"), {"torch": entry})
    (found,) = measured_steps_for(config, report)
    assert (found.framework, found.policy, found.speedup) == ("torch", "mixed_float16", 1.5)
    cells = expand(config, report, "run-1", [found])[2]
    assert "mixed_float16" in policies(cells)
    other = build_config(RunOptions(config=CI, frameworks=["torch"], threads=1))
    assert measured_steps_for(other, report) == []  # measured with 2 threads, not 1
