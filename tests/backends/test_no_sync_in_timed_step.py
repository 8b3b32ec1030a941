"""No host-device sync of mpbench's own inside a timed torch step, for any policy.

On a GPU every value read back from the device (`.item()`, `bool(tensor)`,
`GradScaler.get_scale()`, an explicit synchronize) inside the timed region makes the host
wait, which only the cells that do it pay: fp16's loss scaler used to read its scale twice
per step, biasing fp16-vs-fp32 downward. On this CPU the reads are caught by instrumenting
them while the real `_train_synced` loop runs a real GradScaler; what needs the scale or the
overflow flags (skipped steps, the divergence watch) must still see every step, read after
the clock stopped.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import mpbench  # noqa: E402
from mpbench.backends.base import StepPlan  # noqa: E402
from mpbench.backends.timing import StepTimer  # noqa: E402
from mpbench.backends.torch import backend  # noqa: E402
from mpbench.backends.torch.precision import apply_policy  # noqa: E402
from mpbench.policies import resolve  # noqa: E402
from mpbench.telemetry.cell import CellTelemetry  # noqa: E402

CPU = torch.device("cpu")
OWN_CODE = str(Path(mpbench.__file__).parent)
STEPS, POISONED = 6, 3  # the 1-based step whose gradients are made non-finite

# Reads that wait for the device; only calls made from mpbench's own code count (torch's
# GradScaler.step reads its overflow flags itself, as every AMP loop does).
TENSOR_READS = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__")


class Reads:
    """Records device reads made while a step's clock runs."""

    def __init__(self) -> None:
        self.timing = False
        self.seen: list[str] = []

    def watch(self, monkeypatch: pytest.MonkeyPatch, owner: object, name: str, anyone: bool):
        original = getattr(owner, name)

        def watched(*args, **kwargs):
            if self.timing:
                caller = sys._getframe(1).f_code
                if anyone or caller.co_filename.startswith(OWN_CODE):
                    self.seen.append(f"{name} from {caller.co_filename}:{caller.co_name}")
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, watched)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Reads:
    reads = Reads()

    class WatchedTimer(StepTimer):
        def start(self) -> None:
            super().start()
            reads.timing = True

        def stop(self) -> float:
            reads.timing = False
            return super().stop()

    monkeypatch.setattr(backend, "StepTimer", WatchedTimer)
    for name in TENSOR_READS:
        reads.watch(monkeypatch, torch.Tensor, name, anyone=False)
    reads.watch(monkeypatch, torch.amp.GradScaler, "get_scale", anyone=True)
    reads.watch(monkeypatch, torch.cuda, "synchronize", anyone=True)
    return reads


def train(policy: str, loss_scale: float | None) -> tuple[object, CellTelemetry, object]:
    """Six timed steps of the real loop. With a loss scaler, step POISONED gets infinite
    gradients (a finite loss, so no non-finite-loss divergence) through a hook on the first
    layer's weight; without one they would reach the weights."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-3)
    precision = apply_policy(resolve(policy), CPU, loss_scale)
    done = {"steps": 0}

    def poison(grad: torch.Tensor) -> torch.Tensor:
        return torch.full_like(grad, float("inf")) if done["steps"] + 1 == POISONED else grad

    if precision.scaler is not None:
        model[0].weight.register_hook(poison)
    generator = torch.Generator().manual_seed(0)
    x, y = torch.rand(64, 8, generator=generator), torch.randint(0, 4, (64,), generator=generator)
    batches = backend._Batches(x, y, 8, 8, generator)
    plan = StepPlan(steps_per_epoch=8, epochs=1, total_steps=STEPS, warmup_steps=1)
    dynamic = precision.scaler is not None and precision.static_scale is None
    telemetry = CellTelemetry("cpu", dynamic_scale=dynamic)

    def after_step() -> None:
        done["steps"] += 1

    steps = backend._Steps(
        model, model, optimizer, precision, batches, plan, lambda: None, lambda *_: None,
        after_step=after_step,
    )  # fmt: skip
    trained = backend._train_synced(steps, {}, telemetry)
    return trained, telemetry, precision


@pytest.mark.parametrize(
    ("policy", "loss_scale"),
    [("fp32", None), ("tf32", None), ("bf16", None), ("fp16", None), ("fp16", 128.0)],
    ids=["fp32", "tf32", "bf16", "fp16-dynamic", "fp16-static"],
)
def test_no_device_read_of_mpbench_inside_a_timed_step(reads, policy, loss_scale):
    trained, _, _ = train(policy, loss_scale)
    assert len(trained.step_times_s) == STEPS
    assert reads.seen == []


@pytest.mark.parametrize("loss_scale", [None, 128.0], ids=["dynamic", "static"])
def test_skipped_steps_are_still_seen_after_the_clock(reads, loss_scale):
    trained, telemetry, precision = train("fp16", loss_scale)
    columns = telemetry.numerics.to_dict()["columns"]
    assert columns["step"] == list(range(1, STEPS + 1))
    assert columns["skipped"] == [step == POISONED for step in range(1, STEPS + 1)]
    assert trained.skipped_steps == 1
    scales = columns["loss_scale"]
    if loss_scale is None:  # the dynamic scale backs off exactly at the skipped step
        assert scales[POISONED - 1] == scales[POISONED - 2] / 2
        assert scales[POISONED - 2] == 65536.0
    else:
        assert scales == [loss_scale] * STEPS
    assert precision.scaler.get_scale() == scales[-1]
    assert reads.seen == []
