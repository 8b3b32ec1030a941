"""`mpbench history --ci`: does the newest run bring a new regression, against the history?

A pairwise gate (`compare --baseline`) misses a slow drift, and one noisy baseline makes it
flaky. This gate asks the whole series instead (changepoints.py): the newest run fails when
- the change point that starts the newest level is a regression (step time up, or a policy's
  speed-up down), its whole 95 % interval past --threshold, as compare's gates judge; a value
  past it with an interval reaching back is *inconclusive* (exit 0, said on stderr);
- and the history without the newest run did not fail on that change already: a regression
  fails CI once, on the run that first reveals it (usually its own; sometimes the next, when
  one point was not enough to tell). Once it is known, the new level is the history's.
Nothing is gated on a series with fewer than MIN_POINTS trusted points, or whose newest point
compare distrusts (a busy machine): both are said, never counted as a pass that was measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mpbench.history.changepoints import MIN_POINTS, PENALTY, ChangePoint, Detection, detect
from mpbench.history.series import Series

DEFAULT_THRESHOLD = 0.05  # as the CI recipe's max-slowdown gate (.github/mpbench-gate.sh)

FAIL = "FAIL"
INCONCLUSIVE = "inconclusive"
PASS = "pass"
IMPROVED = "improved"
KNOWN = "known"  # failed on an earlier run already
TOO_FEW = "too few points"
BUSY = "not gated (busy)"


@dataclass(frozen=True)
class NewestVerdict:
    outcome: str
    text: str
    change: ChangePoint | None = None

    @property
    def failed(self) -> bool:
        return self.outcome == FAIL


def newest_verdict(series: Series, threshold: float = DEFAULT_THRESHOLD) -> NewestVerdict:
    """The gate's verdict on a series' newest point (module docstring)."""
    if not series.points:
        return NewestVerdict(TOO_FEW, "no points")
    newest = series.points[-1]
    if newest.distrust is not None:
        return NewestVerdict(BUSY, f"newest run not gated: {newest.distrust}")
    values = [series.points[i].estimate.value for i in series.trusted]
    if series.detection is None:
        return NewestVerdict(TOO_FEW, f"{len(values)} trusted points; the gate needs {MIN_POINTS}")
    return judge_values(values, series.worse, threshold, _penalty(series), series.detection)


def judge_values(
    values: list[float],
    worse: int,
    threshold: float = DEFAULT_THRESHOLD,
    penalty: float = PENALTY,
    detection: Detection | None = None,
) -> NewestVerdict:
    """The gate on a series of values, the newest last; `worse` +1 where higher is a
    regression (step time), -1 where lower is (speed-up). benchmarks/history_power.py
    measures it on synthetic series."""
    if len(values) < MIN_POINTS:
        return NewestVerdict(TOO_FEW, f"{len(values)} trusted points; the gate needs {MIN_POINTS}")
    detection = detection or detect(values, penalty)
    now = _judge(detection.changes, worse, threshold)
    if now.outcome != FAIL:
        return now
    # Did the history without the newest run fail on this change already?
    earlier = _judge(detect(values[:-1], penalty).changes, worse, threshold)
    if earlier.failed and earlier.change and abs(earlier.change.index - now.change.index) <= 1:
        return NewestVerdict(KNOWN, f"{now.text}; an earlier run failed on it", now.change)
    return now


def _penalty(series: Series) -> float:
    """The penalty factor the series was analysed with (its per-cut penalty over ln n)."""
    detection = series.detection
    return detection.penalty / math.log(max(detection.points, 2))


def percent(fraction: float) -> str:
    return f"{fraction * 100:g} %"


def _judge(changes: list[ChangePoint], worse: int, threshold: float) -> NewestVerdict:
    """The base rule on the change that starts the newest level, if there is one."""
    last = changes[-1] if changes else None
    if last is None:
        return NewestVerdict(PASS, "no change point")
    size = f"{last.change * 100:+.1f} % (95 % {last.low * 100:+.1f} to {last.high * 100:+.1f})"
    if last.change * worse <= 0:
        return NewestVerdict(IMPROVED, f"improved {size}", last)
    if min(last.low * worse, last.high * worse) > threshold:  # the whole interval is past it
        return NewestVerdict(FAIL, f"regression {size}, past {percent(threshold)}", last)
    if last.change * worse > threshold:
        return NewestVerdict(
            INCONCLUSIVE, f"regression {size}: past {percent(threshold)}, its interval is not", last
        )
    return NewestVerdict(PASS, f"change {size} within {percent(threshold)}", last)
