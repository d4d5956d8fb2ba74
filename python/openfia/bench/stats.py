"""Statistics of repeated timings: medians, their confidence intervals, and paired ratios.

A ratio of two implementations is the median of the per-round ratios (each round times one
call of each, back to back, so a machine that slows down for a while slows both sides of the
rounds it touches). Its confidence interval is the distribution-free one for a median: the
order statistics x(k+1) .. x(n-k) with k = floor((n - 1.96 sqrt(n)) / 2), which cover the true
median with probability about 95% whatever the distribution of the timings.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


def median(xs):
    s = sorted(xs)
    n = len(s)
    if n == 0:
        return math.nan
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def median_interval(xs):
    """(low, high): an interval that holds the median of the distribution xs are drawn from with
    probability ~95% (at least 93.75% for n >= 5; the whole range for n < 6)."""
    s = sorted(xs)
    n = len(s)
    if n == 0:
        return math.nan, math.nan
    k = max(0, int((n - 1.96 * math.sqrt(n)) // 2))
    return s[k], s[n - 1 - k]


@dataclass
class Ratio:
    """How many times longer `num` takes than `den`, from paired rounds."""
    value: float     # median of the per-round ratios
    low: float       # its ~95% confidence interval
    high: float
    rounds: int

    @property
    def rel_halfwidth(self):
        """Half the interval's width relative to the ratio (0.05: within about +-5%)."""
        if not (self.value > 0 and math.isfinite(self.high)):
            return math.inf
        return (self.high - self.low) / (2 * self.value)


def paired_ratio(num, den):
    """The Ratio of two lists of times taken in the same rounds (num[i] and den[i] together)."""
    rs = [a / b for a, b in zip(num, den) if b > 0]
    lo, hi = median_interval(rs)
    return Ratio(median(rs), lo, hi, len(rs))
