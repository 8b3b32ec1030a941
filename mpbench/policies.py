"""The precision contract (docs/architecture.md): policy names, aliases and device support
rules.

This module is a leaf: it imports nothing else from mpbench and no framework, so that
`detect` (to rate devices) and `run` (to choose and skip cells) share one set of rules.

A rating answers "will this policy be faster than float32 *in this framework* on this
device". It comes from a rule on the device's traits (compute capability, CPU flags) or,
where `detect --measure` timed the framework's own training step, from that measurement,
which wins over the rule; each rating says which (`PolicyRating.source`). Measurements come in
as plain data (MeasuredStep), so this module still reads no cache and imports no framework.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import Enum

from mpbench.errors import unknown_choice


@dataclass(frozen=True)
class Policy:
    """One precision policy and every fact about it that mpbench uses: what it computes in
    (run), which peak bounds it (detect, MFU), what it falls back to (runner/fallback.py), what
    it is compared with, and how compare names and draws it. A new policy is one row here."""

    name: str
    aliases: tuple[str, ...]
    compute_dtype: str  # dtype of matmuls/convolutions: float32, float16, bfloat16
    tf32: bool  # float32 matmuls may use TF32 Tensor Core math
    loss_scaling: bool  # dynamic loss scaling (GradScaler / LossScaleOptimizer)
    peak_key: str  # which column of the peak TFLOP/s table bounds this policy
    short: str  # its name in compare's tables, verdicts and plot ticks (`fp16 [loss scale 1024]`)
    marker: str  # its matplotlib marker on compare's plots (loss curves, points)
    # Its loss-curve colour on compare's plots; None: a spare colour of the plot's, by the row's
    # place (float8's: a colour of its own would change the plots that show it).
    colour: str | None = None
    # `--on-diverge fallback`: the policies a diverged cell is run again under, best first; the
    # first that the device supports is taken. Empty: nothing below it.
    fallbacks: tuple[str, ...] = ()
    # The policy it builds on, its nearest accuracy reference after float32: float8's ops other
    # than its fp8 GEMMs run under mixed_bfloat16 (mpbench.fp8_rules). None: it builds on none.
    base: str | None = None
    # float8: Linear/Dense GEMMs in fp8 on top of the compute dtype (docs/policies.md, "fp8");
    # an opt-in policy (an optional extra for torch): `--policy auto` never picks it.
    fp8: bool = False

    @property
    def compute_bytes(self) -> int:
        """Bytes per element of its compute dtype: what a step's tensors move under it (the
        bottleneck's byte count, the speed-up ceiling's bound on non-matmul work)."""
        return DTYPE_BYTES[self.compute_dtype]


DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


FLOAT32 = Policy(
    name="float32",
    aliases=("fp32",),
    compute_dtype="float32",
    tf32=False,
    loss_scaling=False,
    peak_key="fp32",
    short="fp32",
    marker="o",
    colour="#222222",  # the neutral one: every other policy is read against it
)
TF32 = Policy(
    name="tf32",
    aliases=(),
    compute_dtype="float32",
    tf32=True,
    loss_scaling=False,
    peak_key="tf32",
    short="tf32",
    marker="D",
    colour="#8d6a9f",
    fallbacks=("float32",),
)
MIXED_FLOAT16 = Policy(
    name="mixed_float16",
    aliases=("fp16", "amp_fp16"),
    compute_dtype="float16",
    tf32=False,
    loss_scaling=True,
    peak_key="fp16",
    short="fp16",
    marker="s",
    colour="#e07b00",
    fallbacks=("mixed_bfloat16", "float32"),
)
MIXED_BFLOAT16 = Policy(
    name="mixed_bfloat16",
    aliases=("bf16", "amp_bf16"),
    compute_dtype="bfloat16",
    tf32=False,
    loss_scaling=False,
    peak_key="bf16",
    short="bf16",
    marker="^",
    colour="#2a9d5c",
    fallbacks=("float32",),
)
# fp8 GEMMs for the eligible Linear/Dense layers, everything else under mixed_bfloat16.
FLOAT8 = Policy(
    name="float8",
    aliases=("fp8", "mixed_float8"),
    compute_dtype="bfloat16",
    tf32=False,
    loss_scaling=False,
    peak_key="fp8",
    short="fp8",
    marker="v",  # bf16's triangle upside down: bf16 is its base
    fallbacks=("mixed_bfloat16", "float32"),
    base="mixed_bfloat16",
    fp8=True,
)

POLICIES: dict[str, Policy] = {
    p.name: p for p in (FLOAT32, TF32, MIXED_FLOAT16, MIXED_BFLOAT16, FLOAT8)
}
BASELINE = FLOAT32.name

# Selectors accepted wherever a *set* of policies is named (`--policy auto`, `--policy all`).
SELECTORS = ("auto", "all")


def _lookup_table() -> dict[str, Policy]:
    table = {}
    for policy in POLICIES.values():
        table[policy.name] = policy
        for alias in policy.aliases:
            table[alias] = policy
    return table


_BY_NAME = _lookup_table()


def valid_names() -> list[str]:
    """Every accepted spelling, canonical names first (for error messages)."""
    names = list(POLICIES)
    names += [a for p in POLICIES.values() for a in p.aliases]
    return names


def resolve(name: str) -> Policy:
    """Canonical policy for a name or alias (case-insensitive); InvalidInput otherwise."""
    policy = _BY_NAME.get(name.strip().lower())
    if policy is None:
        raise unknown_choice("policy", name, [*valid_names(), *SELECTORS])
    return policy


class Rating(str, Enum):
    FAST = "fast"
    SLOW = "slow"
    # Runs, with the policy's numerics, but not on the hardware the policy is for: its step
    # time is the cost of emulation, never a speed (float8 off sm_89+).
    EMULATED = "emulated"
    UNSUPPORTED = "unsupported"


@dataclass(frozen=True)
class DeviceTraits:
    """What the rules need to know about one device, whatever probed it."""

    kind: str  # cuda, rocm, cpu, tpu, mps
    name: str
    compute_capability: tuple[int, int] | None = None  # NVIDIA only
    cpu_flags: frozenset[str] | None = None  # CPU only; None when the flags are unknown
    # NVIDIA only; None = follow the compute capability. False on the CC 7.5 parts without
    # Tensor Cores (GeForce GTX 16xx and other TU116/TU117 GPUs).
    tensor_cores: bool | None = None


# The frameworks a rating can be for (mpbench.backends.FRAMEWORKS, repeated: a leaf).
FRAMEWORKS = ("torch", "tensorflow")

# Where a rating comes from: a rule on the device's traits, or a measured training step.
RULE = "rule"
MEASURED = "measured"

# A measured step rates a policy fast when it ran at least this much faster than float32's.
# Not 1.0: two medians of a short, interleaved timing on a shared machine differ by a few
# per cent with nothing changed, and a policy that gains under 10 % on the step `detect`
# times is not worth its numerics risk by default (`-p` still runs it).
MEASURED_FAST_SPEEDUP = 1.10


@dataclass(frozen=True)
class MeasuredStep:
    """One framework's measured training step under one policy on one device, against its
    float32 step in the same process (mpbench.detect.steps): the data a measured rating
    comes from."""

    framework: str  # torch | tensorflow
    policy: str  # canonical policy name
    speedup: float  # float32's median step time / this policy's (> 1: faster)
    measured_at: str  # ISO 8601, when it was measured (the cache's date)
    # Stopped after one timed step, over 20× float32's time: the slow-down is at least this.
    stopped_early: bool = False

    def describe(self) -> str:
        """The speed-up in words: "1.45× faster", "3.1× slower", "≥ 150× slower"."""
        if self.speedup >= 1:
            return f"{self.speedup:.2f}× faster"
        bound = "≥ " if self.stopped_early else ""
        return f"{bound}{1 / self.speedup:.3g}× slower"


@dataclass(frozen=True)
class PolicyRating:
    policy: str
    rating: Rating
    reason: str  # starts with where it comes from: "rule: ..." or "measured ..."
    source: str = RULE  # RULE or MEASURED
    framework: str | None = None  # None: the device-level view (rate's docstring)


@dataclass(frozen=True)
class Recommendation:
    policy: str
    reason: str


def _cc(device: DeviceTraits) -> str:
    major, minor = device.compute_capability or (0, 0)
    return f"{major}.{minor}"


# Hardware fp8 GEMMs (e4m3/e5m2 Tensor Cores): Ada sm_89, Hopper sm_90, Blackwell sm_100+.
# torch._scaled_mm refuses fp8 below it ("only supported on CUDA devices with compute
# capability >= 9.0 or 8.9"); Transformer Engine's support matrix says the same.
FP8_MIN_CC = (8, 9)
# Why a CPU runs fp8 emulated, in detect's rating and in a float8 cell's `fp8.why` alike. No
# dtype here: the emulated GEMM's dtype is the backend's, recorded from what ran (`fp8.gemm`).
FP8_CPU_REASON = "no CPU has fp8 matrix units"


def _rate_nvidia(policy: Policy, device: DeviceTraits) -> PolicyRating:
    cc = device.compute_capability or (0, 0)
    here = f"compute capability {_cc(device)}"
    if policy is FLOAT8:
        if cc >= FP8_MIN_CC:
            return PolicyRating(policy.name, Rating.FAST, f"fp8 Tensor Cores ({here} >= 8.9)")
        return PolicyRating(
            policy.name,
            Rating.EMULATED,
            f"no fp8 Tensor Cores ({here} < 8.9): fp8 numerics emulated, slower than bf16",
        )
    if policy is FLOAT32:
        return PolicyRating(policy.name, Rating.FAST, "baseline: float32 with TF32 off")
    if policy is TF32:
        if cc >= (8, 0):
            return PolicyRating(policy.name, Rating.FAST, f"TF32 Tensor Cores ({here} >= 8.0)")
        return PolicyRating(
            policy.name, Rating.UNSUPPORTED, f"TF32 needs compute capability >= 8.0; {here}"
        )
    if policy is MIXED_FLOAT16:
        if cc >= (7, 0) and device.tensor_cores is False:
            return PolicyRating(
                policy.name,
                Rating.FAST,
                f"double-rate fp16 units, no Tensor Cores (TU116/TU117 Turing, {here})",
            )
        if cc >= (7, 0):
            return PolicyRating(policy.name, Rating.FAST, f"fp16 Tensor Cores ({here} >= 7.0)")
        return PolicyRating(
            policy.name,
            Rating.SLOW,
            f"no Tensor Cores ({here} < 7.0): saves memory, little or no speed-up",
        )
    if cc >= (8, 0):
        return PolicyRating(policy.name, Rating.FAST, f"bf16 Tensor Cores ({here} >= 8.0)")
    return PolicyRating(
        policy.name, Rating.SLOW, f"no native bf16 ({here} < 8.0): emulated, slower than fp16"
    )


def _has_any(flags: frozenset[str], *names: str) -> str | None:
    return next((n for n in names if n in flags), None)


def _rate_cpu(policy: Policy, device: DeviceTraits, framework: str) -> PolicyRating:
    flags = device.cpu_flags
    if policy is FLOAT32:
        return PolicyRating(policy.name, Rating.FAST, "baseline")
    if policy is TF32:
        return PolicyRating(
            policy.name, Rating.UNSUPPORTED, "TF32 is an NVIDIA GPU math mode; CPUs have none"
        )
    if policy is FLOAT8:
        # torch._scaled_mm on a CPU upcasts to float32 (oneDNN only with AMX-INT8, which has
        # no fp8 units either). A float8 cell never calls it here: torchao's emulate=True
        # multiplies the fp8-rounded operands in float32, Keras' float8 layers in bfloat16.
        # Which one ran is the cell's record (fp8.gemm), not a rating.
        return PolicyRating(
            policy.name,
            Rating.EMULATED,
            f"{FP8_CPU_REASON}: fp8 numerics emulated, slower than float32",
        )
    if flags is None:
        return PolicyRating(
            policy.name, Rating.SLOW, "CPU features unknown: assume emulated and slow"
        )
    if policy is MIXED_BFLOAT16:
        # x86: AMX or AVX-512 BF16; Arm (Graviton3+, Grace): the `bf16` feature (BFMMLA).
        found = _has_any(flags, "amx_bf16", "avx512_bf16", "bf16")
        if found:
            return PolicyRating(policy.name, Rating.FAST, f"native bf16 matmul ({found})")
        return PolicyRating(
            policy.name,
            Rating.SLOW,
            "no amx_bf16/avx512_bf16 (x86) or bf16 (Arm): bf16 is emulated, "
            "usually slower than float32",
        )
    return _rate_cpu_fp16(policy, flags, framework)


# Keras' mixed-precision guide: on a CPU fp16 "will run significantly slower" than float32;
# measured on a 2-core AMX Xeon with avx512_fp16 (no amx_fp16), Keras 3.15 / TF 2.21 (load
# average 1.35): mnist_dense 784→64→64→10 at batch 512, 2.24 ms a step in float32, 180× that
# in mixed_float16 (`mpbench run -f tensorflow -w mnist_dense -p fp32 -p fp16 --batch-size
# 512`, the fp16 cell stopped early).
TF_CPU_FP16_REASON = (
    "TensorFlow runs fp16 far slower than float32 on any CPU (Keras mixed-precision guide; "
    "180× measured on a Xeon with avx512_fp16)"
)


def _rate_cpu_fp16(policy: Policy, flags: frozenset[str], framework: str) -> PolicyRating:
    """fp16 on a CPU. TensorFlow: slow everywhere. torch: fast only with AMX-FP16 tiles
    (Granite Rapids). With avx512_fp16 alone torch 2.13's fp16 matmuls ran no faster than
    float32 on a Xeon, and its convolutions' backward ~140× slower (rate_convolutions)."""
    if framework == "tensorflow":
        return PolicyRating(policy.name, Rating.SLOW, TF_CPU_FP16_REASON)
    if "amx_fp16" in flags:
        return PolicyRating(policy.name, Rating.FAST, "AMX tiles multiply fp16 (amx_fp16)")
    if "avx512_fp16" in flags:
        return PolicyRating(
            policy.name,
            Rating.SLOW,
            "avx512_fp16 without amx_fp16: torch's fp16 matmuls are no faster than float32, "
            "its convolutions' backward far slower",
        )
    return PolicyRating(
        policy.name,
        Rating.SLOW,
        "no amx_fp16/avx512_fp16: fp16 works but is emulated, much slower than float32",
    )


def _rate_tpu(policy: Policy) -> PolicyRating:
    if policy is FLOAT8:
        return PolicyRating(policy.name, Rating.UNSUPPORTED, "mpbench has no fp8 path for TPUs")
    return {
        "float32": PolicyRating(policy.name, Rating.FAST, "baseline"),
        "tf32": PolicyRating(policy.name, Rating.UNSUPPORTED, "TF32 is an NVIDIA GPU math mode"),
        "mixed_float16": PolicyRating(
            policy.name, Rating.UNSUPPORTED, "TPUs compute in bfloat16, not float16"
        ),
        "mixed_bfloat16": PolicyRating(policy.name, Rating.FAST, "TPU matrix units are bf16"),
    }[policy.name]


def _rate_other_gpu(policy: Policy, device: DeviceTraits) -> PolicyRating:
    vendor = "Apple GPU (MPS)" if device.kind == "mps" else "AMD GPU (ROCm)"
    if policy is FLOAT8 and device.kind == "mps":
        # pytorch/pytorch#132624: "Trying to convert Float8_e5m2 to the MPS backend but it
        # does not have support for that dtype" (e4m3fn alone arrived in late 2026).
        return PolicyRating(
            policy.name, Rating.UNSUPPORTED, "torch's MPS backend lacks the float8 dtypes"
        )
    if policy is FLOAT8:
        # MI300's fp8 (the fnuz formats) is not a path mpbench has checked: numerics only.
        return PolicyRating(
            policy.name,
            Rating.EMULATED,
            f"mpbench labels only NVIDIA sm_89+ fp8 as hardware: fp8 numerics on an {vendor}",
        )
    if policy is FLOAT32:
        return PolicyRating(policy.name, Rating.FAST, "baseline")
    if policy is TF32:
        return PolicyRating(
            policy.name, Rating.UNSUPPORTED, f"TF32 is an NVIDIA math mode; not on an {vendor}"
        )
    if policy is MIXED_FLOAT16:
        return PolicyRating(policy.name, Rating.FAST, f"native fp16 on an {vendor}")
    if device.kind == "mps":
        return PolicyRating(
            policy.name, Rating.SLOW, "bf16 on MPS needs macOS 14+ and is not faster than fp16"
        )
    return PolicyRating(policy.name, Rating.FAST, f"native bf16 on an {vendor}")


def _rule(policy: Policy, device: DeviceTraits, framework: str) -> PolicyRating:
    """The rule's rating of `policy` in `framework` on `device`, its reason unprefixed."""
    if device.kind == "cuda":
        return _rate_nvidia(policy, device)
    if device.kind == "cpu":
        return _rate_cpu(policy, device, framework)
    if device.kind == "tpu":
        return _rate_tpu(policy)
    return _rate_other_gpu(policy, device)


def _measured(rule: PolicyRating, step: MeasuredStep | None, policy: Policy) -> PolicyRating | None:
    """The rating a measured step gives, or None where none applies: no measurement, the
    baseline itself, a policy the device cannot run, or float8 (never measured)."""
    if step is None or policy is FLOAT32 or policy.fp8 or rule.rating is Rating.UNSUPPORTED:
        return None
    fast = step.speedup >= MEASURED_FAST_SPEEDUP
    rating = Rating.FAST if fast else Rating.SLOW
    reason = f"measured {step.describe()} than float32 here"
    if not fast and step.speedup >= 1:
        reason += f", under the {MEASURED_FAST_SPEEDUP:.2f}× that rates it fast"
    reason += f" (cached {step.measured_at[:10]})"
    if rating is not rule.rating:
        reason += f", where the rule says {rule.rating.value}"
    return PolicyRating(policy.name, rating, reason, MEASURED, rule.framework)


def _step_for(
    measured: Iterable[MeasuredStep] | None, framework: str, policy: Policy
) -> MeasuredStep | None:
    return next(
        (m for m in measured or () if m.framework == framework and m.policy == policy.name),
        None,
    )


def _rate_in(
    policy: Policy,
    device: DeviceTraits,
    framework: str,
    measured: Iterable[MeasuredStep] | None,
) -> PolicyRating:
    rule = _rule(policy, device, framework)
    rule = replace(rule, reason=f"{RULE}: {rule.reason}", framework=framework)
    return _measured(rule, _step_for(measured, framework, policy), policy) or rule


# Best first: the device-level view takes the best framework's rating.
_ORDER = (Rating.FAST, Rating.SLOW, Rating.EMULATED, Rating.UNSUPPORTED)


def _device_level(ratings: list[PolicyRating]) -> PolicyRating:
    """One rating for the device from each framework's: the best of them (fast where any
    framework runs it fast), its reason the frameworks' own, one reason where they agree."""
    best = min(ratings, key=lambda r: _ORDER.index(r.rating))
    if len({(r.rating, r.reason) for r in ratings}) == 1:
        return replace(best, framework=None)
    reason = "; ".join(f"{r.framework}: {r.rating.value} ({r.reason})" for r in ratings)
    source = MEASURED if any(r.source == MEASURED for r in ratings) else RULE
    return PolicyRating(best.policy, best.rating, reason, source, None)


def rate(
    policy: Policy | str,
    device: DeviceTraits,
    framework: str | None = None,
    measured: Iterable[MeasuredStep] | None = None,
) -> PolicyRating:
    """How well `device` runs `policy` in `framework`: fast (faster than float32), slow
    (works, little or no gain), emulated or unsupported, with the reason and its source.

    `measured`: the device's measured steps (any frameworks, any policies); the one of this
    framework and policy, where there is one, decides over the rule (MEASURED_FAST_SPEEDUP).
    `framework` None: the device-level view, the best of the frameworks' ratings (fast when
    fast in at least one framework), for callers that rate a device, not a cell."""
    if isinstance(policy, str):
        policy = resolve(policy)
    steps = list(measured or ())
    if framework is not None:
        return _rate_in(policy, device, framework, steps)
    return _device_level([_rate_in(policy, device, f, steps) for f in FRAMEWORKS])


def rate_all(
    device: DeviceTraits,
    framework: str | None = None,
    measured: Iterable[MeasuredStep] | None = None,
) -> list[PolicyRating]:
    steps = list(measured or ())
    return [rate(p, device, framework, steps) for p in POLICIES.values()]


def auto_policies(
    device: DeviceTraits,
    framework: str | None = None,
    measured: Iterable[MeasuredStep] | None = None,
) -> list[Policy]:
    """The default set: float32 plus every policy rated fast on the device in `framework`
    (None: in any framework); float8 only when named (it needs an optional extra for torch
    and pays off only on large GEMMs)."""
    steps = list(measured or ())
    fast = [
        p
        for p in POLICIES.values()
        if not p.fp8 and rate(p, device, framework, steps).rating is Rating.FAST
    ]
    return [FLOAT32, *(p for p in fast if p is not FLOAT32)]


def rate_convolutions(policy: Policy, device: DeviceTraits) -> PolicyRating | None:
    """A slower rating than `rate` gives, for a workload with convolutions, or None.

    fp16 on a CPU with AVX-512 FP16 but no AMX-FP16: torch 2.13's CPU fp16 convolution
    *backward* is emulated. On a 2-core Xeon with avx512_fp16 and no AMX, Conv2d(32, 64, 3)
    on 64×32×32×32 took 0.030 s backward in float32 and 4.08 s in fp16 (medians of 3, load
    average 1.2; forward alike): a CIFAR-10 CNN cell would not finish within its timeout.
    The rule already rates fp16 slow there; this matters where a measured dense step rated
    it fast (the micro-step has no convolution). AMX-FP16 (Granite Rapids) computes the
    convolutions in tiles. Measured on that one CPU only: Sapphire Rapids is rated alike."""
    flags = device.cpu_flags
    if device.kind != "cpu" or policy is not MIXED_FLOAT16 or flags is None:
        return None
    if "avx512_fp16" in flags and "amx_fp16" not in flags:
        return PolicyRating(
            policy.name,
            Rating.SLOW,
            "rule: avx512_fp16 without amx_fp16: fp16 convolutions' backward is emulated, far "
            "slower than float32 (~140× measured on a Xeon)",
        )
    return None


def left_out_by_auto(
    device: DeviceTraits,
    framework: str | None = None,
    measured: Iterable[MeasuredStep] | None = None,
) -> list[PolicyRating]:
    """What `auto` leaves out on the device in `framework` (None: the device-level view),
    each with its rating (slow, emulated, unsupported; float8 also where it is fast, being
    opt-in)."""
    steps = list(measured or ())
    chosen = auto_policies(device, framework, steps)
    return [rate(p, device, framework, steps) for p in POLICIES.values() if p not in chosen]


def help_names() -> str:
    """The policies as `--policy`'s help lists them: each name with its short alias."""
    return ", ".join("|".join((p.name, *p.aliases[:1])) for p in POLICIES.values())


def recommend(
    device: DeviceTraits,
    frameworks: Iterable[str] = FRAMEWORKS,
    measured: Iterable[MeasuredStep] | None = None,
) -> Recommendation:
    """The policy to train in on `device` with `frameworks` (the installed ones): bf16 where
    it is fast in every one (no loss scaling), else fp16 where it is, else a policy fast in
    some of them, named so, else float32. "fp16 equally good" only where fp16 is fast in
    every framework too."""
    names = list(frameworks) or list(FRAMEWORKS)
    steps = list(measured or ())

    def ratings(policy: Policy) -> list[PolicyRating]:
        return [rate(policy, device, f, steps) for f in names]

    bf16, fp16 = ratings(MIXED_BFLOAT16), ratings(MIXED_FLOAT16)
    bf16_everywhere, fp16_everywhere = _fast_in_all(bf16), _fast_in_all(fp16)
    if bf16_everywhere and fp16_everywhere:
        return Recommendation(
            "mixed_bfloat16",
            "bf16 and fp16 are both fast; bf16 needs no loss scaling (fp16 equally good)",
        )
    if bf16_everywhere:
        fp16_fast = [r.framework or "" for r in fp16 if r.rating is Rating.FAST]
        also = f"; fp16 is fast too, in {', '.join(fp16_fast)} only" if fp16_fast else ""
        return Recommendation("mixed_bfloat16", _reasons(bf16) + also)
    if fp16_everywhere:
        return Recommendation("mixed_float16", f"{_reasons(fp16)}; keep dynamic loss scaling on")
    for policy, said in (("mixed_bfloat16", bf16), ("mixed_float16", fp16)):
        fast = [r for r in said if r.rating is Rating.FAST]
        if fast:
            only = ", ".join(r.framework or "" for r in fast)
            return Recommendation(policy, f"in {only} only: {_reasons(fast)}")
    return Recommendation(
        "float32", "no fast reduced-precision math here: mixed precision only saves memory"
    )


def _fast_in_all(ratings: list[PolicyRating]) -> bool:
    return all(r.rating is Rating.FAST for r in ratings)


def _reasons(ratings: list[PolicyRating]) -> str:
    """The frameworks' reasons, once where they agree."""
    reasons = list(dict.fromkeys(r.reason for r in ratings))
    if len(reasons) == 1:
        return reasons[0]
    return "; ".join(f"{r.framework}: {r.reason}" for r in ratings)
