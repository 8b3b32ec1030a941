"""One row of one group against float32, as data: every estimate compare shows and the
verdict, computed once by summary/build.py and only read by the gates, renderers and plot.

The estimates are taken in build.py; this module holds what they produce, so that the cells
(summary/cells.py) can carry their comparisons without importing how they are made.
"""

from __future__ import annotations

from dataclasses import dataclass

from mpbench.compare.summary.accuracy import AccuracyVerdict
from mpbench.compare.summary.estimate import Estimate
from mpbench.policies import POLICIES
from mpbench.results.identity import Row


def short(row: str) -> str:
    """A row (`mixed_float16 [loss scale 1024]` -> `fp16 [loss scale 1024]`) or a policy's name
    (`mixed_bfloat16` -> `bf16`) by the policy's short name (mpbench.policies). A name that is
    no policy stays."""
    policy, variant = (row.policy, row.variant) if isinstance(row, Row) else (row, None)
    known = POLICIES.get(policy)
    name = known.short if known is not None else policy
    return f"{name} {variant}" if variant else name


# What a mismatch of compiled and eager says where a run behind it used --compile already
# (--also-eager: the eager rows beside the compiled ones), instead of advice to add it.
COMPILED_ROWS = "the [compile] rows compile both"


def compile_said(compiled: str, advice: str, compile_ran: bool) -> str:
    """`fp8 compiled, bf16 eager: add --compile to compile bf16 too`: the mismatch and
    `advice`, or, where the run used --compile already, where both are compiled."""
    return f"{compiled}: {COMPILED_ROWS if compile_ran else advice}"


@dataclass
class PolicyVerdict:
    policy: str
    evidence: str  # "2.45× faster (95 % 2.41–2.52), -0.13 pp accuracy, -35 % training memory"
    advice: str  # one of summary/verdict.py's constants
    why: str | None = None  # the device's reason, when it explains the advice

    def text(self) -> str:
        """`bf16: 2.45× faster (95 % 2.41–2.52), ... → recommended here`."""
        text = f"{short(self.policy)}: {self.evidence} → {self.advice}"
        return f"{text} ({self.why})" if self.why else text


@dataclass(frozen=True)
class AgainstBase:
    """A row against the policy it builds on, in its group: float8's is bf16 (every op that
    is not an fp8 GEMM runs in it), so bf16 is what fp8 must beat. None wherever the estimate
    cannot be taken; an emulated fp8 row has its accuracy only."""

    base: str  # the base policy: "mixed_bfloat16"
    speedup: Estimate | None  # the base's step time / the row's
    memory_ratio: Estimate | None  # the row's memory / the base's, same kind of memory only
    accuracy_delta_pp: Estimate | None  # test accuracy minus the base's, in points
    accuracy: AccuracyVerdict | None  # that difference judged at the margin
    compiled: str | None = None  # "fp8 compiled, bf16 eager" where the two differ
    # A run behind the two used --compile: `compiled` never advises it (compile_said).
    compile_ran: bool = False
    distrust: str | None = None  # why the timing cannot be trusted (a busy machine)
    busy_share: float | None = None  # as Comparison's
    memory_refused: str | None = None  # why no memory ratio: two kinds of memory figure


@dataclass(frozen=True)
class Comparison:
    """A row of a group against float32 (float32's own row included: its ratios to itself are
    the `ref` of the tables). None wherever the estimate cannot be taken."""

    row: str
    speedup: Estimate | None  # float32 step time / the row's; None for emulated fp8
    emulation_cost: Estimate | None  # an emulated fp8 row's step time / float32's
    end_to_end_speedup: Estimate | None
    memory_ratio: Estimate | None  # the row's memory / float32's, same kind of memory only
    accuracy_delta_pp: Estimate | None  # test accuracy minus float32's, in points
    # Why the evidence against float32 cannot be trusted (busy machine, impossible figure).
    distrust: str | None
    # Where a busy machine is the only doubt: the largest share of CPU time others took from
    # either cell (contention.taken_share), which a timing gate may look past (gates.py);
    # None where the evidence is quiet, or a figure is implausible besides.
    busy_share: float | None = None
    # The accuracy difference judged by its interval at the margin (summary/accuracy.py);
    # None for float32 itself and where there is no difference to judge.
    accuracy: AccuracyVerdict | None = None
    verdict: PolicyVerdict | None = None  # None for float32, the reference itself
    # Against the policy the row builds on (float8's: bf16) where the group has a cell of it.
    vs_base: AgainstBase | None = None
    compiled: str | None = None  # "fp8 compiled, float32 eager" where the two differ
    compile_ran: bool = False  # a run behind the two used --compile (compile_said)
    # An emulated fp8 row (PolicyGroup.emulated), decided once: no speed-up, memory ratio or
    # end-to-end speed-up is taken of it, and its verdict is the emulated one.
    emulated: bool = False
    # Why there is no memory ratio though both rows have a figure: the two measure different
    # things (summary/cells.memory_mismatch), and a ratio of them would mean nothing.
    memory_refused: str | None = None
