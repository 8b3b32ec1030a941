"""Accuracy judged by its interval: is a policy no worse than float32, by a margin?

A point estimate decides nothing: on synthetic data one repeat's accuracy moves by tens of
points, so "-6.7 pp" may be noise and "+8.1 pp" too. This is a non-inferiority rule (the
margin fixed before looking, as in a non-inferiority trial): with the 95 % interval of the
accuracy difference (the policy minus float32, paired by run and repeat, so by seed):

- **no worse**: the whole interval lies above -margin;
- **worse**: the whole interval lies below -margin;
- **inconclusive**: otherwise, with about how many repeats would decide, from the spread seen.

A gain is never a failure for the verdicts: an interval above +margin is "no worse" too.
The `--max-accuracy-delta` gate asks more, by the same interval: that the policy trained the
same thing as float32, so a difference beyond the limit either way fails (an equivalence test,
both sides of TOST); see `within`. Neither ever decides on a point estimate (docs/compare.md,
"Accuracy").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mpbench.compare.summary import fmt
from mpbench.compare.summary.estimate import REPEATS, Estimate

DEFAULT_MARGIN_PP = 1.0  # points: `--accuracy-margin`, `[run] accuracy_margin`

NO_WORSE = "no worse"
WORSE = "worse"
INCONCLUSIVE = "inconclusive"
# Beyond this many repeats we say "many more" rather than a count: the estimate sits so near
# the margin that the repeats a decision needs are no practical advice.
MOST_REPEATS_SAID = 200


@dataclass(frozen=True)
class AccuracyVerdict:
    outcome: str  # NO_WORSE, WORSE or INCONCLUSIVE
    margin_pp: float
    # Inconclusive: about how many repeat pairs in all would put the interval on one side of
    # -margin at the spread seen (None: one repeat, no spread yet; or too many to say).
    repeats_needed: int | None = None
    why: str = ""  # inconclusive: what is missing

    @property
    def word(self) -> str:
        """The outcome in a word for the verdict's evidence: `undecided` where inconclusive,
        so that it is not read as the speed-up's `inconclusive`."""
        return "undecided" if self.outcome == INCONCLUSIVE else self.outcome

    def text(self) -> str:
        """`no worse than float32 (margin 1 pp)`, `inconclusive at a 1 pp margin: ...`."""
        margin = f"{self.margin_pp:g} pp"
        if self.outcome == NO_WORSE:
            return f"no worse than float32 (95 % interval above -{margin})"
        if self.outcome == WORSE:
            return f"worse than float32 by more than {margin} (95 % interval below -{margin})"
        return f"accuracy undecided at a {margin} margin: {self.why}"


def judge(delta: Estimate | None, margin_pp: float) -> AccuracyVerdict | None:
    """The accuracy verdict of a difference (policy - float32, in points); None without one."""
    if delta is None:
        return None
    if delta.kind != REPEATS:
        why = "one repeat, so no interval: --repeat 3 gives one"
        return AccuracyVerdict(INCONCLUSIVE, margin_pp, None, why)
    if delta.low > -margin_pp:
        return AccuracyVerdict(NO_WORSE, margin_pp)
    if delta.high < -margin_pp:
        return AccuracyVerdict(WORSE, margin_pp)
    needed = repeats_to_decide(delta, margin_pp)
    span = f"its 95 % interval, {fmt.points(delta.low)} to {fmt.points(delta.high)}, "
    span += f"spans -{margin_pp:g} pp"
    if needed is None:
        return AccuracyVerdict(INCONCLUSIVE, margin_pp, None, f"{span}; many more repeats")
    return AccuracyVerdict(
        INCONCLUSIVE, margin_pp, needed, f"{span}; about {needed} repeats would decide"
    )


def within(delta: Estimate, limit_pp: float) -> str:
    """The gate's rule: NO_WORSE where the whole interval lies within ±limit, WORSE where it
    lies wholly beyond either side, INCONCLUSIVE otherwise and for one repeat (no interval)."""
    if delta.kind != REPEATS:
        return INCONCLUSIVE
    if delta.high < -limit_pp or delta.low > limit_pp:
        return WORSE
    if -limit_pp < delta.low and delta.high < limit_pp:
        return NO_WORSE
    return INCONCLUSIVE


def repeats_to_decide(delta: Estimate, margin_pp: float) -> int | None:
    """About how many repeat pairs in all would shrink the interval to the distance between
    the estimate and -margin, at the spread seen (the half-width falls as 1/sqrt(n); the
    t-quantile's fall with n is left out, so the count errs high). None: too many to say."""
    half_width = (delta.high - delta.low) / 2
    distance = abs(delta.value + margin_pp)
    if distance == 0:
        return None
    needed = math.ceil(delta.n * (half_width / distance) ** 2)
    needed = max(needed, delta.n + 1)
    return needed if needed <= MOST_REPEATS_SAID else None
