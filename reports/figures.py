"""The board figures that are statistics over seeds, drawn by seaborn: accuracy against FLOPs, accuracy per domain.

seaborn does what it is for here: it groups the per-seed values at each FLOP value (or domain),
aggregates them with the board's estimator and draws the 95% interval over seeds as a band
(`lineplot`) or an error bar (`barplot`). The estimator and interval are the tables' own
(`reports.stats`: IQM from 3 seeds, else the mean; percentile bootstrap over runs; no interval for one
seed), passed as seaborn's `estimator` and `errorbar` callables, so a figure and its table agree.
seaborn's built-in ("ci", 95) would bootstrap the mean, in a Python loop of 1,000 draws per point.

matplotlib (Agg backend, SVG, text kept as text: `svg.fonttype` none) and seaborn are imported on
the first figure, not with `reports`. Styling matches `reports.svgplot` (which draws the per-method
figures: ~100 of them, where matplotlib's 0.1-0.3 s a figure would not fit the 10 s budget), dark
variant included (DARK_STYLE, for a reader in the dark colour scheme), and colours are each method's
own (`reports.colours`), the same as the tables' swatches and every other figure's.
Names come from records: `_labels` strips what XML forbids and truncates; matplotlib escapes the
rest, and mathtext is off so a `$` is a dollar sign.
"""

from __future__ import annotations

import io
import math
import multiprocessing
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from contextlib import contextmanager

import numpy as np
import pandas as pd

from reports.stats import CURVE_REPS, DEFAULT_REPS, aggregate, interval, point
from reports.svgplot import ACC_MIN_SPAN, LogScale, flops_label

WIDTH_PT, HEIGHT_PT = 680, 360  # the SVG's user units, as reports.svgplot.WIDTH / HEIGHT
FONTS = ["system-ui", "-apple-system", "Segoe UI", "Roboto", "Helvetica", "Arial", "DejaVu Sans"]
RC = {
    "svg.fonttype": "none", "svg.hashsalt": "opd-bench", "text.parse_math": False,
    "font.family": "sans-serif", "font.sans-serif": FONTS, "font.size": 11,
    "text.color": "#333333", "axes.labelcolor": "#333333", "axes.edgecolor": "#8a909c", "axes.linewidth": 1.0,
    "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True, "axes.axisbelow": True,
    "grid.color": "#e3e6ec", "grid.linewidth": 1.0, "xtick.color": "#8a909c", "ytick.color": "#8a909c",
    "xtick.labelcolor": "#5b6475", "ytick.labelcolor": "#5b6475", "xtick.labelsize": 11, "ytick.labelsize": 11,
    "legend.frameon": False, "legend.fontsize": 11, "figure.facecolor": "white", "axes.facecolor": "white",
}
# the plot box of reports.svgplot (left 70, top 34, 420 x 274 of 680 x 360): legend on the right
_BOX = {"left": 70 / WIDTH_PT, "right": 490 / WIDTH_PT, "top": 1 - 34 / HEIGHT_PT, "bottom": 52 / HEIGHT_PT}
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
# The dark variant of RC's colours, as reports.svgplot's: matplotlib writes each colour into an inline
# style attribute ("fill: #333333"), which a stylesheet rule overrides only with !important
_DARK = {"fill: #ffffff": "fill:#1b1f27", "fill: #333333": "fill:#d5d9e0", "fill: #5b6475": "fill:#a3abb9",
         "fill: #1d2330": "fill:#eef0f4", "stroke: #e3e6ec": "stroke:#343a46", "stroke: #333333": "stroke:#d5d9e0"}
DARK_STYLE = ("<style>@media (prefers-color-scheme:dark){"
              + "".join(f'[style*="{k}"]{{{v} !important}}' for k, v in _DARK.items()) + "}</style>")
_SVG_OPEN = re.compile(r"<svg\b[^>]*>")


MAX_WORKERS = 4
POOL_FROM_FIGURES = 8  # fewer figures are drawn in-process: forking workers that import seaborn costs ~1 s


def _import_plotting():
    """seaborn, imported after matplotlib is put on its Agg backend (unless the host chose one with pyplot)."""
    import matplotlib

    if "matplotlib.pyplot" not in sys.modules:  # seaborn imports pyplot: the backend is set before it
        matplotlib.use("Agg")
    import seaborn

    return seaborn


@contextmanager
def drawing_pool(n_figures: int, max_workers: int = MAX_WORKERS) -> Iterator[Executor | None]:
    """Worker processes that draw `n_figures` seaborn figures while the main process renders the rest.

    A figure costs ~0.15-0.25 s of CPU and importing seaborn ~1 s: most of a 1,000-record build,
    which two cores finish in about half the time. seaborn is imported before the workers are forked
    on entry. Yields None (draw in this process) for a few figures, and where a fork is unsafe
    or useless: not Linux, another thread running (a fork copies its locks mid-use), one core.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    workers = min(cores, max_workers)
    if sys.platform != "linux" or threading.active_count() > 1 or workers < 2 or n_figures < POOL_FROM_FIGURES:
        yield None
        return
    _import_plotting()  # once, here: each forked worker inherits it (two imports would cost ~1 s more CPU)
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        yield pool


def clean_label(text: object, limit: int = 24) -> str:
    """An untrusted name as figure text: no XML-invalid characters, at most `limit` characters.

    A leading "_" would make matplotlib leave the entry out of the legend: it gets a zero-width space.
    """
    s = _NOT_XML.sub("\ufffd", str(text))
    s = s if len(s) <= limit else s[: limit - 1] + "…"
    return "\u200b" + s if s.startswith("_") or not s else s


def _labels(names: Sequence[str], limit: int = 24) -> list[str]:
    """A distinct figure label per name, in order (names that clean or truncate alike are numbered)."""
    out: list[str] = []
    for name in names:
        label, n = clean_label(name, limit), 2
        while label in out:
            label = f"{clean_label(name, limit - 4)} ({n})"
            n += 1
        out.append(label)
    return out


def _mapped(column: pd.Series, labels: dict[str, str]) -> pd.Series:
    """The column's figure labels, as Python objects: seaborn groups those ~15% faster than pandas strings."""
    return pd.Series([labels[v] for v in column], index=column.index, dtype=object)


def seed_interval(reps: int, seed: int = 0) -> Callable[[Sequence[float]], tuple[float, float]]:
    """seaborn `errorbar`: the 95% percentile-bootstrap interval of reports.stats.point over seeds.

    One generator per figure, drawn in seaborn's (fixed) group order: a rebuilt site is identical.
    One value has no interval (NaN: seaborn draws none).
    """
    rng = np.random.default_rng(seed)

    def errorbar(values: Sequence[float]) -> tuple[float, float]:
        x = np.asarray(values, dtype=float)
        if x.size < 2:
            return math.nan, math.nan
        lo, hi = interval(aggregate(x[rng.integers(0, x.size, size=(reps, x.size))], axis=1))
        return (math.nan, math.nan) if lo is None else (lo, hi)

    return errorbar


def _figure(title: str, draw: Callable) -> str:
    """Draw on a fresh figure under the site's style (no global pyplot state) and return its SVG.

    draw(ax) returns the legend entries, [(label, kind, colour, dashes)] with kind "line" or "box".
    The SVG gets DARK_STYLE right after its opening tag.
    """
    _import_plotting()
    import matplotlib
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(WIDTH_PT / 72, HEIGHT_PT / 72))
        ax = fig.add_subplot()
        fig.subplots_adjust(**_BOX)
        fig.text(12 / WIDTH_PT, 1 - 20 / HEIGHT_PT, clean_label(title, 90), fontsize=13, fontweight="bold",
                 color="#1d2330", verticalalignment="baseline")
        entries = draw(ax)
        if entries:
            handles = [Patch(color=colour) if kind == "box" else
                       Line2D([], [], color=colour, linewidth=2.0, dashes=dashes or (None, None))
                       for _, kind, colour, dashes in entries]
            ax.legend(handles, [e[0] for e in entries], loc="upper left", bbox_to_anchor=(1.02, 1.0),
                      borderaxespad=0.0, handlelength=2.2)
        out = io.StringIO()
        # no metadata block: no timestamp (a rebuilt site is byte-identical), no links to matplotlib.org
        fig.savefig(out, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    svg = out.getvalue()
    opening = _SVG_OPEN.search(svg)
    return svg if opening is None else svg[: opening.end()] + DARK_STYLE + svg[opening.end():]


def accuracy_curves(curves: pd.DataFrame, colours: dict[str, str], reference: str | None,
                    base_accuracy: float | None, title: str) -> str:
    """Accuracy against counted FLOPs (log x): per method the aggregate over seeds and its 95% band.

    Args:
        curves: one row per (run, FLOP value): columns method, flops (> 0), accuracy; every run of a
            method on the same FLOP values (carried flat to the budget).
        colours: method -> colour, in legend order.
        reference: the board's reference method (dashed), or None.
        base_accuracy: the base model's accuracy, a dotted line; None for none.
        title: the board's name.
    Returns:
        the SVG document.
    """
    sns = _import_plotting()
    from matplotlib import ticker

    names = [m for m in colours if m in set(curves["method"])]
    label_of = dict(zip(names, _labels([f"{m} (ref.)" if m == reference else m for m in names])))
    dashes = {m: (5, 2.5) if m == reference else "" for m in names}

    def draw(ax) -> list[tuple]:
        entries = []
        # labels first: seaborn lays out the tick labels to decide on its own when there are none
        ax.set(xlabel="counted training FLOPs", ylabel="held-out accuracy")
        if names:
            sns.lineplot(curves.assign(label=_mapped(curves["method"], label_of)), x="flops", y="accuracy",
                         hue="label", hue_order=[label_of[m] for m in names], style="label",
                         style_order=[label_of[m] for m in names],
                         palette={label_of[m]: colours[m] for m in names},
                         dashes={label_of[m]: dashes[m] for m in names}, estimator=point,
                         errorbar=seed_interval(CURVE_REPS), err_kws={"alpha": 0.16}, linewidth=1.8,
                         legend=False, ax=ax)
            ax.set_xscale("log")
            lo, hi = curves["flops"].min(), curves["flops"].max()
            ax.set_xlim(lo / 1.1, hi * 1.1)
            # reports.svgplot's ticks (1-2-5 steps within a decade or two) and labels: no mathtext, alike
            ax.xaxis.set_major_locator(ticker.FixedLocator(LogScale(lo / 1.1, hi * 1.1).ticks()))
            ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: flops_label(v)))
            ax.xaxis.set_minor_locator(ticker.NullLocator())
            entries = [(label_of[m], "line", colours[m], dashes[m]) for m in names]
        if base_accuracy is not None:
            ax.axhline(base_accuracy, color="#888888", linewidth=1.0, dashes=(2, 3))
            entries.append(("base model", "line", "#888888", (2, 3)))
        bottom = max(0.0, min(ax.get_ylim()[0], base_accuracy or 1.0) - 0.02)
        top = ax.get_ylim()[1]
        if top - bottom < ACC_MIN_SPAN:  # equal accuracies (all 0 in a smoke run): a readable span, not noise
            top = bottom + ACC_MIN_SPAN
            bottom, top = (1.0 - ACC_MIN_SPAN, 1.0) if top > 1.0 else (bottom, top)
        ax.set_ylim(bottom, top)
        return entries

    return _figure(f"Accuracy against FLOPs: {title}", draw)


def domain_accuracy(domains: pd.DataFrame, colours: dict[str, str]) -> str:
    """Final accuracy per domain: grouped bars per method, the aggregate over seeds with its 95% interval.

    Args:
        domains: one row per (run, domain): columns method, domain, accuracy.
        colours: method -> colour, in legend order.
    Returns:
        the SVG document.
    """
    sns = _import_plotting()
    names = [m for m in colours if m in set(domains["method"])]
    label_of = dict(zip(names, _labels(names)))
    domain_names = sorted(set(domains["domain"]))
    domain_of = dict(zip(domain_names, _labels(domain_names, limit=18)))

    def draw(ax) -> list[tuple]:
        ax.set(xlabel="domain", ylabel="final held-out accuracy")
        if names:
            data = domains.assign(label=_mapped(domains["method"], label_of),
                                  where=_mapped(domains["domain"], domain_of))
            sns.barplot(data, x="where", y="accuracy", hue="label", order=list(domain_of.values()),
                        hue_order=[label_of[m] for m in names], palette={label_of[m]: colours[m] for m in names},
                        estimator=point, errorbar=seed_interval(DEFAULT_REPS),
                        err_kws={"linewidth": 1.1, "color": "#333333"}, capsize=0.12, saturation=1.0,
                        legend=False, ax=ax)
            ax.grid(axis="x", visible=False)
        ax.set_ylim(0.0, 1.0)
        return [(label_of[m], "box", colours[m], None) for m in names]

    return _figure("Final accuracy per domain", draw)


SEABORN_FIGURES = (accuracy_curves, domain_accuracy)  # what reports.site hands to drawing_pool's workers
