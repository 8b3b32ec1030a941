"""The float8 policy in torch (backends/torch/fp8.py): the layer plan, the hardware/emulated label
under faked devices, and real torchao float8 training on CPU (emulated) at tiny sizes."""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from types import SimpleNamespace

import pytest
from builders import cell_spec

torch = pytest.importorskip("torch")
pytest.importorskip("torchao")

from mpbench import fp8_rules as rules  # noqa: E402
from mpbench.backends.base import CellSpec, Unsupported  # noqa: E402
from mpbench.backends.torch import fp8 as tfp8  # noqa: E402
from mpbench.backends.torch import fp8_layers  # noqa: E402
from mpbench.backends.torch.backend import run_cell  # noqa: E402
from mpbench.backends.torch.models import build_model  # noqa: E402
from mpbench.workloads.spec import get_workload  # noqa: E402

CPU = torch.device("cpu")


def _cell(workload: str, units: int | None, **spec: object) -> SimpleNamespace:
    values = dict(
        fp8_mode="auto", fp8_recipe="tensorwise", units=units, sizes={}, batch_size=32,
        compile=False, fp8_eager=False,
    )  # fmt: skip
    values.update(spec)
    return SimpleNamespace(
        spec=SimpleNamespace(**values), workload=get_workload(workload), device=CPU
    )


def test_mnist_dense_plan_keeps_the_10_class_head_in_bf16_and_counts_the_flops():
    cell = _cell("mnist_dense", 64)
    model = build_model(cell.workload, 64)
    fp8 = tfp8.apply_fp8(cell, model, torch.zeros(32, 784))
    assert fp8["layers_fp8"] == ["0", "2"]
    assert list(fp8["skipped_layers"]) == ["4"]
    assert "out 10 not a multiple of 16" in fp8["skipped_layers"]["4"]
    assert [type(m).__name__ for m in model] == [
        "Float8Linear", "ReLU", "Float8Linear", "ReLU", "Linear",
    ]  # fmt: skip
    # by hand: 2·784·64 + 2·64·64 of 2·784·64 + 2·64·64 + 2·64·10 multiply-adds per sample
    fp8_flops = 2 * 784 * 64 + 2 * 64 * 64
    assert fp8["flop_share_fp8"] == pytest.approx(fp8_flops / (fp8_flops + 2 * 64 * 10))
    assert fp8["mode"] == "emulated" and fp8["requested"] == "auto"
    assert fp8["formats"] == {
        "input": "float8_e4m3fn", "weight": "float8_e4m3fn", "grad_output": "float8_e5m2",
    }  # fmt: skip
    assert fp8["scaling"] == "dynamic (current) scaling, per tensor"
    assert fp8["base_policy"] == "mixed_bfloat16" and fp8["gemm"].startswith("emulated")
    assert fp8["backend"].startswith("torchao ") and fp8["recipe"] == "tensorwise"


def test_cnn_plan_skips_the_convolutions_and_the_head():
    cell = _cell("cifar10_cnn", None)
    model = build_model(cell.workload, None)
    fp8 = tfp8.apply_fp8(cell, model, torch.zeros(32, 3, 32, 32))
    assert fp8["layers_fp8"] == ["7"]
    assert fp8["skipped_layers"]["0"] == fp8_layers.CONV_REASON
    assert fp8["skipped_layers"]["3"] == fp8_layers.CONV_REASON
    assert "multiple of 16" in fp8["skipped_layers"]["9"]
    assert 0 < fp8["flop_share_fp8"] < 0.5  # the convolutions dominate


def _fake(monkeypatch, kind: str, capability, probe=None):
    monkeypatch.setattr(tfp8, "device_capability", lambda device: capability)
    monkeypatch.setattr(tfp8, "probe_scaled_mm", probe or (lambda device, recipe: None))
    return SimpleNamespace(type=kind)


def test_labels_under_faked_devices(monkeypatch):
    h100 = _fake(monkeypatch, "cuda", (9, 0))
    assert tfp8.label(h100, "auto", "tensorwise").mode == "hardware"
    assert tfp8.label(h100, "emulated", "tensorwise").mode == "emulated"
    a100 = _fake(monkeypatch, "cuda", (8, 0))
    run = tfp8.label(a100, "auto", "tensorwise")
    assert run.mode == "emulated" and "8.0 < 8.9" in run.why
    with pytest.raises(Unsupported) as refused:
        tfp8.label(torch.device("cpu"), "hardware", "tensorwise")
    assert "\n" not in str(refused.value) and "--fp8-mode hardware" in str(refused.value)


def test_a_probe_that_raises_is_a_path_refusal(monkeypatch):
    def refuse(device, recipe):
        return f"this torch build's _scaled_mm refused {recipe} scales here: nope"

    h100 = _fake(monkeypatch, "cuda", (9, 0), refuse)
    run = tfp8.label(h100, "auto", "rowwise")
    assert run.mode == "emulated" and "refused rowwise scales" in run.why
    with pytest.raises(Unsupported, match="refused rowwise scales"):
        tfp8.label(h100, "hardware", "rowwise")


def test_the_probe_reports_the_first_line_of_the_error(monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("bad scales\nmore detail")

    monkeypatch.setattr(torch, "_scaled_mm", boom)
    why = tfp8.probe_scaled_mm(CPU, "rowwise")
    assert why == "this torch build's _scaled_mm refused rowwise scales here: bad scales"


def _scaled_mm_refusal(recipe: str) -> str | None:
    """This torch build's own answer to the probe's GEMM, asked directly: its first error
    line, or None where it runs (CPU rowwise scales run in torch 2.13, not in 2.11)."""
    a = torch.randn(32, 128).to(torch.float8_e4m3fn)
    b = torch.randn(32, 128).to(torch.float8_e4m3fn).t()
    shapes = {"tensorwise": ((), ()), "rowwise": ((32, 1), (1, 32))}[recipe]
    sa, sb = (torch.ones(shape, dtype=torch.float32) for shape in shapes)
    try:
        torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
    except Exception as exc:
        return str(exc).strip().splitlines()[0]
    return None


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_the_real_probe_runs_on_cpu_and_says_what_this_build_refuses(recipe):
    refusal = _scaled_mm_refusal(recipe)
    answer = tfp8.probe_scaled_mm(CPU, recipe)
    if refusal is None:
        assert answer is None
    else:
        assert answer == f"this torch build's _scaled_mm refused {recipe} scales here: {refusal}"
    if recipe == "tensorwise":  # every torch mpbench supports runs per-tensor scales on a CPU
        assert answer is None


def test_missing_torchao_is_unsupported_with_the_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchao", None)
    monkeypatch.setitem(sys.modules, "torchao.float8", None)
    with pytest.raises(Unsupported, match=r"pip install 'mpbench\[fp8\]'"):
        tfp8.import_torchao()


def _spec(policy: str, **extra: object) -> CellSpec:
    """An in-process float8 cell runs eager: compiling it costs 10-20 s of C++ builds on a
    CPU, and what these tests read does not depend on it (the compiled path: the CLI test
    below, tests/runner/test_compile_once.py and the GPU check's dry run)."""
    values = dict(epochs=5, max_steps=None, units=64, intra_op_threads=1, fp8_eager=True)
    return cell_spec(policy=policy, **{**values, **extra})


def test_a_float8_cell_trains_emulated_on_cpu_close_to_bf16():
    fp8 = run_cell(_spec("float8"), lambda s, t: None, lambda m: None)
    bf16 = run_cell(_spec("mixed_bfloat16"), lambda s, t: None, lambda m: None)
    assert fp8.status == "ok" and fp8.fp8["mode"] == "emulated"
    assert fp8.fp8["layers_fp8"] == ["0", "2"]
    assert bf16.fp8 is None
    # 5 epochs of 16 steps (+ the end-to-end window): test loss ~0.90 from ~2.3 untrained.
    # Here bf16 and float32 of the same seed differ by ~0.03 (fp8 vs bf16: ~0.005), and the
    # research runs (200 steps) kept fp8 within 0.01 of bf16: 0.05 is that noise band, far
    # below what a broken conversion would give (a loss near 2.3).
    assert fp8.test_loss == pytest.approx(bf16.test_loss, abs=0.05)


def test_the_rowwise_recipe_trains_on_cpu():
    result = run_cell(_spec("float8", fp8_recipe="rowwise"), lambda s, t: None, lambda m: None)
    assert result.status == "ok" and result.fp8["recipe"] == "rowwise"
    assert result.fp8["mode"] == "emulated"
    assert "per row" in result.fp8["scaling"] and "power-of-2" in result.fp8["scaling"]
    assert result.fp8["formats"]["grad_output"] == "float8_e4m3fn"


def test_a_language_model_counts_its_sequence_rows():
    cell = _cell("transformer_lm", 32)
    cell.spec.sizes = {"heads": 2, "layers": 1, "seq_len": 16}
    model = build_model(cell.workload, 32, **cell.spec.sizes)
    tokens = torch.zeros(32, 16, dtype=torch.long)
    fp8 = tfp8.apply_fp8(cell, model, tokens)
    assert fp8["layers_fp8"] == ["blocks.0.qkv", "blocks.0.proj", "blocks.0.fc_1", "blocks.0.fc_2"]
    # The embeddings are listed as staying in bf16, the token table with its tied head.
    assert fp8["skipped_layers"] == {
        "tokens": fp8_layers.TIED_FUNCTIONAL_HEAD,
        "positions": fp8_layers.EMBEDDING,
    }
    model = build_model(cell.workload, 32, **cell.spec.sizes)
    plan = fp8_layers.layer_plan(model, fp8_layers.trace_forward(model, tokens))
    d, t = 32, 16
    assert [x.rows_per_sample for x in plan.fp8] == [t] * 4  # traced: 16 tokens a sample
    assert sum(x.forward_flops_per_sample for x in plan.fp8) == 2 * t * (
        3 * d * d + d * d + 8 * d * d
    )
    # The counter's share, attention on the math path, is the analytic formula's.
    total = cell.workload.forward_flops(1, 32, **cell.spec.sizes)
    assert fp8["flop_share_fp8"] == pytest.approx(2 * t * 12 * d * d / total)
    rows = fp8["prediction"]["rows"]
    forward = [row for row in rows if row["role"] == "forward"]
    assert forward and all(row["m"] == 32 * t for row in forward)  # M = batch × tokens


class _MmWitness:
    """torch, as torchao.float8.float8_ops sees it, with torch.mm recording the dtypes it is
    handed and returns: emulate=True's `torch.mm(a._data.float() / a._scale, ...)` runs below
    autocast, so its result dtype is the dtype the GEMM computed in."""

    def __init__(self) -> None:
        self.ran: set[tuple[str, str, str]] = set()

    def __getattr__(self, name: str) -> object:
        return getattr(torch, name)

    def mm(self, a: torch.Tensor, b: torch.Tensor, *args: object, **kwargs: object):
        out = torch.mm(a, b, *args, **kwargs)
        self.ran.add(tuple(str(t.dtype).removeprefix("torch.") for t in (a, b, out)))
        return out


def test_the_emulated_label_is_what_the_gemm_ran_in_and_what_the_cell_recorded(monkeypatch):
    """Issue 33 item 6. A float8 language-model cell on this CPU: its fp8.gemm must name the
    dtype torchao's emulated GEMM multiplied in (witnessed inside torchao, independently of
    the backend's probe) and the dtype the cell's own op_dtypes trace recorded for the fp8
    layers' aten.mm (torchao's wrapper tensors: the product's dtype). The old fixed label,
    "fp8-rounded operands multiplied in float32", named no bfloat16 the cell recorded."""
    import torchao.float8.float8_ops as float8_ops

    witness = _MmWitness()
    monkeypatch.setattr(float8_ops, "torch", witness)
    spec = _spec("float8", heads=2, layers=1, seq_len=16)
    spec = dataclasses.replace(
        spec, workload="transformer_lm", units=32, batch_size=8, epochs=1, max_steps=4,
        synthetic_train_size=128, synthetic_test_size=16,
    )  # fmt: skip
    result = run_cell(spec, lambda s, t: None, lambda m: None)
    assert result.status == "ok" and result.fp8["mode"] == "emulated"
    recorded = result.precision["op_dtypes"]["aten.mm"]  # the cell's own trace
    assert witness.ran, "torchao's emulated path no longer calls torch.mm: recheck the label"
    multiplied = {dtype for a, b, out in witness.ran for dtype in (a, b, out)}
    assert len(multiplied) == 1  # operands and product in one dtype, below autocast
    assert result.fp8["gemm"] == rules.emulated_gemm("torchao emulate=True", multiplied, recorded)
    # On torch 2.13 / torchao 0.18 under the policy's bf16 autocast:
    assert (multiplied, recorded) == ({"float32"}, "bfloat16")
    assert result.fp8["gemm"].endswith("multiplied in float32, the product cast to bfloat16")


def _config(recipe: str = "tensorwise"):
    _, float8 = tfp8.import_torchao()
    return dataclasses.replace(float8.Float8LinearConfig.from_recipe_name(recipe), emulate=True)


@pytest.mark.parametrize(
    ("autocast", "output"), [(torch.bfloat16, "bfloat16"), (None, "float32")]
)  # fmt: skip
def test_the_probe_follows_the_autocast_in_effect_and_draws_no_random_numbers(autocast, output):
    state = torch.get_rng_state()
    traced = tfp8.traced_gemm(_config(), CPU, autocast)
    assert torch.equal(torch.get_rng_state(), state)  # the cell's seeded stream untouched
    assert traced == tfp8.TracedGemm(["float32"], output)
    label = rules.emulated_gemm("torchao emulate=True", traced.operands, traced.output)
    assert label.endswith("cast to bfloat16" if autocast else "multiplied in float32")


def test_a_probe_that_fails_says_so_in_the_label(monkeypatch):
    cell = _cell("mnist_dense", 64)
    monkeypatch.setattr(tfp8, "traced_gemm", lambda *a: tfp8.TracedGemm([], None, "boom"))
    fp8 = tfp8.apply_fp8(cell, build_model(cell.workload, 64), torch.zeros(32, 784))
    assert fp8["gemm"].endswith(
        "multiplied in a dtype that was not traced (the probe failed: boom)"
    )


def test_a_user_optimizer_must_still_hold_the_converted_parameters():
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Linear(32, 16))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    cell = SimpleNamespace(
        spec=SimpleNamespace(
            fp8_mode="auto",
            fp8_recipe="tensorwise",
            units=None,
            sizes={},
            batch_size=8,
            compile=False,
            fp8_eager=True,
        ),
        workload=SimpleNamespace(kind="user"),
        device=CPU,
    )
    fp8 = tfp8.apply_fp8(cell, model, torch.zeros(8, 16), optimizer)
    # A user model's share is counted like any other's: both GEMMs converted, all of it.
    assert fp8["layers_fp8"] == ["0", "1"] and fp8["flop_share_fp8"] == 1.0
    assert "traced forward" in fp8["flop_share_note"]
    with pytest.raises(RuntimeError, match="no longer holds"):
        tfp8.check_optimizer(model, torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1))


def test_bf16_and_fp8_through_the_cli_compile_fp8_predict_it_and_compare_it_with_bf16(tmp_path):
    """Issue 36's CPU acceptance: `-p bf16 -p fp8` compiles the fp8 cell by default (its compile
    time recorded, not timed), lists its GEMMs with "no fp8 hardware" for a prediction, and
    compare shows fp8 against bf16; --fp8-eager runs it eager."""
    from builders import run_options
    from cli import run_mpbench

    out = tmp_path / "run"
    done = run_mpbench(
        "run", "-f", "torch", "-p", "bf16", "-p", "fp8", "--out", out,
        *run_options(workload="mnist_dense"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    records = {r["policy"]: r for r in map(json.loads, (out / "results.jsonl").open())}
    fp8, bf16 = records["float8"], records["mixed_bfloat16"]
    assert fp8["fp8"]["compiled"] is True and fp8["compile"]["compile_s"] > 0
    assert bf16["compile"] is None  # only the fp8 cell compiles by default
    prediction = fp8["fp8"]["prediction"]
    assert prediction["note"] == "no fp8 hardware: no CPU has fp8 matrix units"
    assert prediction["predicted_gain"] is None and prediction["hardware"] is False
    shapes = {(r["m"], r["k"], r["n"]) for r in prediction["rows"]}
    units, batch = 32, 64  # builders.TINY_WORKLOADS' mnist_dense
    assert (batch, 784, units) in shapes and (units, batch, 784) in shapes  # forward, dW
    shown = run_mpbench("compare", out, "--format", "markdown")
    assert shown.returncode == 0, shown.stderr
    assert "### fp8 against bf16: mnist_dense" in shown.stdout
    assert "### fp8 GEMMs: mnist_dense" in shown.stdout
    # emulated, the share of the step's matmul FLOPs in fp8, compiled fp8 / eager bf16
    assert re.search(r"\| torch fp8 \| emulated \| [\d.]+ % \| yes / no", shown.stdout)

    eager = tmp_path / "eager"
    done = run_mpbench(
        "run", "-f", "torch", "-p", "fp8", "--fp8-eager", "--out", eager,
        *run_options(workload="mnist_dense"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    (record,) = map(json.loads, (eager / "results.jsonl").open())
    assert record["fp8"]["compiled"] is False and record["compile"] is None
