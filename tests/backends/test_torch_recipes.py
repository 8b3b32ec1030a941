"""Training recipes in torch, in-process on tiny models: static loss scale, accumulation,
torch.compile bookkeeping (docs/recipes.md)."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from mpbench.backends.torch.compiled import Compiler  # noqa: E402
from mpbench.backends.torch.precision import apply_policy  # noqa: E402
from mpbench.backends.torch.steps import train_step  # noqa: E402
from mpbench.policies import resolve  # noqa: E402

CPU = torch.device("cpu")


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def _batch(n: int, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 8, generator=g), torch.randint(0, 4, (n,), generator=g)


def _weights(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def test_static_scale_skips_overflowing_steps_and_never_changes():
    model = _model()
    opt = torch.optim.RMSprop(model.parameters(), lr=1e-3)
    precision = apply_policy(resolve("fp16"), CPU, loss_scale=1e30)
    before = _weights(model)
    result = train_step(model, opt, precision, [_batch(16)], check_skip=True)
    assert result.skipped is True  # fp16 gradients of a 1e30-scaled loss overflow
    assert precision.scaler.get_scale() == pytest.approx(1e30, rel=1e-6)  # not halved
    assert all(torch.equal(a, b) for a, b in zip(before, _weights(model), strict=True))


def test_static_scale_that_fits_trains_and_keeps_its_scale():
    model = _model()
    opt = torch.optim.RMSprop(model.parameters(), lr=1e-3)
    precision = apply_policy(resolve("fp16"), CPU, loss_scale=1024.0)
    before = _weights(model)
    for _ in range(3):
        assert train_step(model, opt, precision, [_batch(16)], check_skip=True).skipped is False
    assert precision.scaler.get_scale() == 1024.0
    after = _weights(model)
    assert all(torch.isfinite(w).all() for w in after)
    assert not all(torch.equal(a, b) for a, b in zip(before, after, strict=True))


def test_one_overflowing_micro_batch_skips_the_whole_torch_step():
    model = _model()
    opt = torch.optim.RMSprop(model.parameters(), lr=1e-3)
    precision = apply_policy(resolve("fp16"), CPU, loss_scale=1024.0)
    good, bad = _batch(16), _batch(16, seed=2)
    bad = (torch.full_like(bad[0], float("inf")), bad[1])
    before = _weights(model)
    result = train_step(model, opt, precision, [good, bad, good], check_skip=True)
    assert result.skipped is True
    assert all(torch.equal(a, b) for a, b in zip(before, _weights(model), strict=True))


def test_four_accumulated_micro_batches_equal_one_batch_of_four_times_the_size():
    big = _model()
    small = copy.deepcopy(big)
    precision = apply_policy(resolve("fp32"), CPU)
    x, y = _batch(64)
    opt_big = torch.optim.SGD(big.parameters(), lr=0.1)
    opt_small = torch.optim.SGD(small.parameters(), lr=0.1)
    for _ in range(2):
        full = train_step(big, opt_big, precision, [(x, y)])
        parts = [(x[i : i + 16], y[i : i + 16]) for i in range(0, 64, 16)]
        accumulated = train_step(small, opt_small, precision, parts)
        assert torch.allclose(full.loss, accumulated.loss, atol=1e-6)
    for a, b in zip(_weights(big), _weights(small), strict=True):
        assert torch.allclose(a, b, atol=1e-6)


def test_compile_counts_no_recompiles_for_full_batches_and_one_for_a_short_batch():
    # The "eager" backend: Dynamo traces and guards as with inductor, without code generation.
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    precision = apply_policy(resolve("bf16"), CPU)
    compiler = Compiler(model, backend="eager")
    compiler.compile_step(
        lambda: train_step(compiler.module, opt, precision, [_batch(16)]), lambda: None
    )
    for seed in range(3):
        train_step(compiler.module, opt, precision, [_batch(16, seed)])
    compiler.training_done()
    stats = compiler.stats()
    assert stats.compile_s > 0 and stats.backend == "eager"
    assert stats.recompiles == 0 and stats.frames_compiled >= 1
    train_step(compiler.module, opt, precision, [_batch(10)])  # a short last batch
    compiler.training_done()
    assert compiler.stats().recompiles == 1
