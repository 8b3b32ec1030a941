"""The divergence detector on sequences from real tiny trainings (torch fp16 autocast with a
GradScaler on the CPU) and on hand-written ones where the exact step matters."""

from __future__ import annotations

import json
import math

import pytest

from mpbench.telemetry.divergence import Divergence, DivergenceDetector, DivergenceRules

torch = pytest.importorskip("torch")
nn = torch.nn


@pytest.fixture(autouse=True)
def one_thread():
    """These models are tiny: one thread runs them as fast, and another process busy on the
    machine cannot stall every kernel's thread barrier (seconds per test, seen on 2 cores)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def fp16_run(
    steps: int,
    loss_factor: float = 1.0,
    init_scale: float = 65536.0,
    static: bool = False,
    poison_step: int | None = None,
) -> list[tuple[int, float, float, bool]]:
    """(step, loss, scale after the step, skipped) of a real fp16 autocast training with a
    GradScaler. Inputs scaled by 20 and the loss by `loss_factor` before scaling make the
    float16 gradients overflow at the first scales, as a real model's do; `static` keeps the
    scale fixed as the torch backend's static loss scale does; `poison_step` feeds a NaN
    batch."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale)
    x, y = torch.randn(64, 32) * 20, torch.randint(0, 10, (64,))
    out = []
    for step in range(1, steps + 1):
        optimizer.zero_grad(set_to_none=True)
        batch = torch.full_like(x, math.nan) if step == poison_step else x
        with torch.autocast("cpu", dtype=torch.float16):
            logits = model(batch)
        loss = nn.functional.cross_entropy(logits.float(), y)
        before = scaler.get_scale()
        scaler.scale(loss * loss_factor).backward()
        scaler.step(optimizer)
        if static:
            skipped = bool(sum(v.item() for v in scaler._found_inf_per_device(optimizer).values()))
            scaler.update(new_scale=init_scale)
        else:
            scaler.update()
            skipped = scaler.get_scale() < before
        out.append((step, loss.item(), scaler.get_scale(), skipped))
    return out


def first_fired(detector: DivergenceDetector, run, dynamic: bool = True) -> Divergence | None:
    for step, loss, scale, skipped in run:
        fired = detector.observe(step, loss, scale if dynamic else None, skipped)
        if fired:
            return fired
    return None


def test_a_healthy_dynamic_scale_that_halves_at_the_start_does_not_fire():
    run = fp16_run(40, loss_factor=50.0)  # longer runs reach float16 subnormals: slow
    halvings = sum(skipped for *_, skipped in run)
    assert 4 <= halvings <= 10, halvings  # the start GradScaler has on a real model
    assert all(skipped for *_, skipped in run[:5])
    detector = DivergenceDetector(DivergenceRules(spike_z=6.0))
    assert first_fired(detector, run) is None
    assert detector.fired is None
    assert detector.end_of_cell(halvings, len(run)) is None


def test_a_static_scale_that_overflows_every_step_fires_once_the_window_is_full():
    run = fp16_run(40, loss_factor=50.0, init_scale=65536.0, static=True)
    assert all(skipped for *_, skipped in run)
    fired = first_fired(DivergenceDetector(), run, dynamic=False)
    assert fired is not None and fired.signal == "skipped_fraction"
    assert fired.step == 20  # not before the window of 20 is full
    assert fired.reason == (
        "20 of the last 20 steps skipped for non-finite gradients at step 20 (more than 50%)"
    )
    assert fired.values == {"skipped": 20.0, "window": 20.0, "limit": 0.5}


def test_a_dynamic_scale_that_keeps_halving_fires_at_the_floor():
    # A loss blown up by 1e30 overflows float16 gradients at any scale: GradScaler halves
    # every step, 65536 -> 0.5 after 17 steps, before the skipped window is full.
    run = fp16_run(30, loss_factor=1e30)
    fired = first_fired(DivergenceDetector(), run)
    assert fired is not None and fired.signal == "loss_scale_floor"
    assert fired.step == 17
    assert fired.reason == "loss scale 0.5 fell below 1 at step 17"
    assert fired.values == {"loss_scale": 0.5, "floor": 1.0}


def test_a_poisoned_batch_fires_non_finite_loss_at_its_step():
    run = fp16_run(30, loss_factor=50.0, poison_step=23)
    detector = DivergenceDetector()
    fired = first_fired(detector, run)
    assert fired is not None and fired.signal == "non_finite_loss" and fired.step == 23
    assert fired.reason == "non-finite loss (nan) at step 23"
    assert "loss" not in fired.values  # only finite values: strict JSON
    json.dumps(fired.to_dict(), allow_nan=False)


def test_the_first_divergence_is_kept_and_later_steps_are_ignored():
    detector = DivergenceDetector()
    first = detector.observe(5, math.inf, None, False)
    assert first is not None and first.reason == "non-finite loss (inf) at step 5"
    assert detector.observe(6, 1.0, 0.001, True) is first
    assert detector.fired is first
    assert detector.end_of_cell(30, 30) is first


def test_the_floor_is_only_for_a_scale_passed_and_zero_turns_it_off():
    detector = DivergenceDetector()
    assert detector.observe(1, 2.0, None, True) is None  # static scale: caller passes None
    off = DivergenceDetector(DivergenceRules(min_loss_scale=0.0))
    assert off.observe(1, 2.0, 2.0**-20, False) is None
    nan_scale = DivergenceDetector().observe(3, 2.0, math.nan, False)
    assert nan_scale is not None and nan_scale.signal == "loss_scale_floor"
    assert nan_scale.values == {"floor": 1.0} and "nan" in nan_scale.reason


def test_window_counts_only_the_last_window_steps():
    rules = DivergenceRules(window=10, max_skipped_fraction=0.5)
    detector = DivergenceDetector(rules)
    # 5 skips then healthy: exactly half of a window is not "more than half".
    pattern = [True] * 5 + [False] * 20
    for step, skipped in enumerate(pattern, start=1):
        assert detector.observe(step, 1.0, None, skipped) is None
    # Now 6 skips in the last 10 steps: fires on the 6th.
    for step in range(26, 32):
        fired = detector.observe(step, 1.0, None, True)
    assert fired is not None and fired.step == 31
    assert fired.reason.startswith("6 of the last 10 steps skipped")


def test_skips_spread_over_the_run_leave_the_window_rule_quiet():
    detector = DivergenceDetector()  # one skip in three: never more than half of a window
    for step in range(1, 301):
        assert detector.observe(step, 1.0, None, step % 3 == 0) is None


def test_steps_with_unknown_skip_do_not_enter_the_window():
    detector = DivergenceDetector(DivergenceRules(window=4))
    for step in range(1, 20):
        assert detector.observe(step, 1.0, None, None) is None
    for step in range(20, 23):
        assert detector.observe(step, 1.0, None, True) is None  # window not full yet: 3 of 4
    assert detector.observe(23, 1.0, None, True) is not None


def test_end_of_cell_judges_short_cells_on_all_their_steps():
    """More than half of all counted steps skipped: diverged, however few steps ran."""
    for skipped, counted, diverged in [(6, 10, True), (5, 10, False), (0, 0, False), (3, 3, True)]:
        fired = DivergenceDetector().end_of_cell(skipped, counted, "a static loss scale of 1024")
        assert (fired is not None) == diverged
        if fired:
            assert fired.signal == "skipped_fraction"
            assert fired.reason == (
                f"{skipped} of {counted} steps skipped for non-finite gradients "
                "(more than 50%) with a static loss scale of 1024"
            )
            assert fired.values["skipped"] == skipped and fired.values["counted"] == counted


def test_a_loss_spike_fires_only_when_asked_and_only_with_enough_history():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(64, 16), torch.randint(0, 4, (64,))
    losses = []
    for step in range(120):
        batch = x * 50 if step == 100 else x  # a bad batch, once
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(batch), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    spike = DivergenceDetector(DivergenceRules(spike_z=6.0))
    fired = None
    for step, loss in enumerate(losses, start=1):
        fired = fired or spike.observe(step, loss, None, False)
    assert fired is not None and fired.signal == "loss_spike" and fired.step == 101
    assert fired.values["z"] > 6 and fired.values["limit"] == 6.0
    assert "standard deviations above the mean" in fired.reason
    # Off by default; and the healthy part of the same run does not fire.
    default = DivergenceDetector()
    assert all(default.observe(s, v, None, False) is None for s, v in enumerate(losses, 1))
    healthy = DivergenceDetector(DivergenceRules(spike_z=6.0))
    assert all(healthy.observe(s, v, None, False) is None for s, v in enumerate(losses[:100], 1))
    # Fewer than 10 points: no judgement at all.
    early = DivergenceDetector(DivergenceRules(spike_z=1.0))
    assert all(early.observe(s, v, None, False) is None for s, v in enumerate([1.0] * 9 + [99.0]))


def test_skipped_steps_losses_stay_out_of_the_spike_history():
    detector = DivergenceDetector(DivergenceRules(spike_z=4.0, spike_window=10))
    for step in range(1, 31):
        loss = 2.0 + 0.01 * (step % 3)
        assert detector.observe(step, loss, None, False) is None
        assert detector.observe(step, 50.0, None, True) is None  # skipped: not judged either
    fired = detector.observe(31, 50.0, None, False)
    assert fired is not None and fired.signal == "loss_spike"


def test_rules_are_validated():
    for bad in (
        {"window": 0},
        {"max_skipped_fraction": 1.0},
        {"spike_z": 0.0},
        {"spike_window": 5},
        {"min_loss_scale": -1.0},
    ):
        with pytest.raises(ValueError):
            DivergenceRules(**bad)
