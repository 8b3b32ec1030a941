"""The precision contract (docs/architecture.md): policy names, aliases and device support
rules.

This module is a leaf: it imports nothing else from mpbench and no framework, so that
`detect` (to rate devices) and `run` (to choose and skip cells) share one set of rules.
"""

from __future__ import annotations

from dataclasses import dataclass
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


@dataclass(frozen=True)
class PolicyRating:
    policy: str
    rating: Rating
    reason: str


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


def _rate_cpu(policy: Policy, device: DeviceTraits) -> PolicyRating:
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
    found = _has_any(flags, "amx_fp16", "avx512_fp16")
    if found:
        return PolicyRating(policy.name, Rating.FAST, f"native fp16 arithmetic ({found})")
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


def rate(policy: Policy | str, device: DeviceTraits) -> PolicyRating:
    """How well `device` runs `policy`: fast, slow (works, little gain) or unsupported."""
    if isinstance(policy, str):
        policy = resolve(policy)
    if device.kind == "cuda":
        return _rate_nvidia(policy, device)
    if device.kind == "cpu":
        return _rate_cpu(policy, device)
    if device.kind == "tpu":
        return _rate_tpu(policy)
    return _rate_other_gpu(policy, device)


def rate_all(device: DeviceTraits) -> list[PolicyRating]:
    return [rate(p, device) for p in POLICIES.values()]


def auto_policies(device: DeviceTraits) -> list[Policy]:
    """The default set: float32 plus every policy rated fast on the device; float8 only when
    named (it needs an optional extra for torch and pays off only on large GEMMs)."""
    fast = [p for p in POLICIES.values() if not p.fp8 and rate(p, device).rating is Rating.FAST]
    return [FLOAT32, *(p for p in fast if p is not FLOAT32)]


def rate_convolutions(policy: Policy, device: DeviceTraits) -> PolicyRating | None:
    """A slower rating than `rate` gives, for a workload with convolutions, or None.

    fp16 on a CPU with AVX-512 FP16 but no AMX-FP16: its matmuls are native (measured as fast
    as float32's), but torch 2.13's CPU fp16 convolution *backward* is not. On a 2-core Xeon
    with avx512_fp16 and no AMX, Conv2d(32, 64, 3) on 64×32×32×32 took 0.030 s backward in
    float32 and 4.08 s in fp16 (medians of 3, load average 1.2; forward alike): a CIFAR-10
    CNN cell would not finish within its timeout. AMX-FP16 (Granite Rapids) computes the
    convolutions in tiles; AVX2-only CPUs rate fp16 slow for every workload already. Measured
    on that one CPU only: Sapphire Rapids (avx512_fp16, no AMX-FP16) is rated alike, unmeasured."""
    flags = device.cpu_flags
    if device.kind != "cpu" or policy is not MIXED_FLOAT16 or flags is None:
        return None
    if "avx512_fp16" in flags and "amx_fp16" not in flags:
        return PolicyRating(
            policy.name,
            Rating.SLOW,
            "avx512_fp16 without amx_fp16: fp16 matmuls are native, but fp16 convolutions' "
            "backward is emulated, far slower than float32 (~140× measured on a Xeon)",
        )
    return None


def left_out_by_auto(device: DeviceTraits) -> list[PolicyRating]:
    """What `auto` leaves out on the device, each with its rating (slow, emulated,
    unsupported; float8 also where it is fast, being opt-in)."""
    chosen = auto_policies(device)
    return [rate(p, device) for p in POLICIES.values() if p not in chosen]


def help_names() -> str:
    """The policies as `--policy`'s help lists them: each name with its short alias."""
    return ", ".join("|".join((p.name, *p.aliases[:1])) for p in POLICIES.values())


def recommend(device: DeviceTraits) -> Recommendation:
    ratings = {r.policy: r for r in rate_all(device)}
    bf16, fp16 = ratings["mixed_bfloat16"], ratings["mixed_float16"]
    if bf16.rating is Rating.FAST and fp16.rating is Rating.FAST:
        return Recommendation(
            "mixed_bfloat16",
            "bf16 and fp16 are both fast; bf16 needs no loss scaling (fp16 equally good)",
        )
    if bf16.rating is Rating.FAST:
        return Recommendation("mixed_bfloat16", bf16.reason)
    if fp16.rating is Rating.FAST:
        return Recommendation("mixed_float16", f"{fp16.reason}; keep dynamic loss scaling on")
    return Recommendation(
        "float32", "no fast reduced-precision math here: mixed precision only saves memory"
    )
