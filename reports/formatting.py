"""Text for the site: safe file-name slugs from untrusted names, and numbers with their intervals.

Names in records (methods, suites, plugin names) never appear in a path: `Slugs` maps each to a
lower-case `[a-z0-9_-]` slug, keeping a name that already is one and adding a short hash of the name
otherwise, so two names never share a page and a rebuilt site keeps its URLs.
"""

from __future__ import annotations

import hashlib
import math
import re

from reports.stats import Estimate

_SAFE = re.compile(r"^[a-z0-9]+(?:[_-][a-z0-9]+)*$")
MAX_SLUG = 48
# device names Windows will not open as files, whatever the extension
_RESERVED = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))}


def is_safe_slug(s: str) -> bool:
    """A slug usable as a file name on any OS: lower-case alphanumerics joined by single - or _."""
    # room for a hashed slug (MAX_SLUG + 9), a counter suffix (Slugs) and a figure's "m-" / "s-" prefix
    return len(s) <= MAX_SLUG + 16 and bool(_SAFE.match(s)) and s not in _RESERVED


def slugify(name: str) -> str:
    """The slug of an untrusted name: itself if already safe, else a cleaned prefix plus a name hash."""
    name = str(name)
    if len(name) <= MAX_SLUG and _SAFE.match(name) and name not in _RESERVED:
        return name
    base = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:MAX_SLUG].strip("-") or "x"
    return f"{base}-{hashlib.sha256(name.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"


class Slugs:
    """Unique slugs for a set of names; a second name with the same slug gets a counter suffix."""

    def __init__(self) -> None:
        self._by_name: dict[str, str] = {}
        self._taken: set[str] = set()

    def __call__(self, name: str) -> str:
        if name in self._by_name:
            return self._by_name[name]
        slug, n = slugify(name), 2
        while slug in self._taken:  # a hash collision, or a safe name equal to another's cleaned form
            slug = f"{slugify(name)}-{n}"
            n += 1
        self._by_name[name] = slug
        self._taken.add(slug)
        return slug


def fmt(x: float | None, unit: str) -> str:
    """One number in the unit's style; None -> an em dash."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    if unit == "acc":  # an accuracy, as a percentage (the leads sentence, findings and studies write it so)
        return f"{x * 100:.1f}%"
    if unit == "reward":  # one sample's reward (0 or 1 from a verifier)
        return f"{x:.3g}"
    if unit == "pct":
        return f"{x * 100:.1f}%".replace("-", "−")  # a minus sign, as the infinite ends and points have
    if unit == "pts":  # a difference of accuracies, in percentage points
        return f"{x * 100:+.1f} pts".replace("-", "−")
    if unit == "ratio":
        return f"{x:.2f}×"
    if unit == "flops":
        return f"{x:.2e}".replace("e+", "e")
    if unit == "len":
        return f"{x:.1f}"
    return f"{x:.3g}"


def fmt_estimate(est: Estimate, unit: str, missing: str = "—") -> dict[str, str]:
    """An estimate as {"text", "interval", "sort", "tip"} for a table cell.

    interval is "[low, high]" or "" (single seed or undefined); sort is the raw value for the table's
    column sorting ("" sorts last); tip is a tooltip saying which statistic it is. An undefined point
    with an interval (a target the aggregate curve never reaches, though some replicates do) shows
    `missing` and the interval, which a verdict then reads.
    """
    def end(x: float) -> str:
        return "not reached" if unit == "flops" and x == math.inf else fmt(x, unit)

    interval = ""
    if est.low is not None and est.high is not None:
        interval = f"[{end(est.low)}, {end(est.high)}]"
    if est.value is None:
        if est.low is not None and math.isinf(est.low) and est.low == est.high:
            interval = ""  # no replicate reaches it either: the interval adds nothing to the point
        tip = ("not defined by the aggregate of these runs; 95% bootstrap interval over seeds" if interval
               else "not defined for these runs")
        return {"text": missing, "interval": interval, "sort": "", "tip": tip}
    # with 2 or 3 seeds each end of a per-run metric's interval is a seed's own value (docs/metrics.md)
    few = " (with so few seeds, about their range)" if est.n_seeds <= 3 else ""
    tip = {"iqm": f"interquartile mean of {est.n_seeds} seeds, 95% bootstrap interval{few}",
           "mean": f"mean of {est.n_seeds} seeds, 95% bootstrap interval{few}",
           "single": "single seed: no interval"}.get(est.stat, "")
    return {"text": fmt(est.value, unit), "interval": interval, "sort": repr(float(est.value)), "tip": tip}


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_safe(value: object) -> object:
    """A string cell that a spreadsheet would run as a formula gets a leading apostrophe (OWASP).

    For text cells (names from records) only: a metric is written as a number (results.csv's "-inf"
    is an unbounded interval end, which pandas and spreadsheets read as a number, not a formula).
    """
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value
