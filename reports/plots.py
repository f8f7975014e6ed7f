"""The hand-drawn figures as SVG text: Pareto frontier, FLOPs by phase and kind, length, per-method figures.

Each function takes plain lists and dicts (no pandas) and returns one SVG document, drawn by
`reports.svgplot` (see there for why not matplotlib). The board figures that are statistics over
seeds (accuracy against FLOPs with bands, accuracy per domain) are seaborn's: `reports.figures`.
Colours are each method's own (`reports.colours`): the same on every board, in the tables' swatches
and in reports.figures. Lines that are not a method's (the frontier's legend key, the fit) are drawn in
INK, the SVG's text colour, so they follow its dark variant.
Names on figures come from records: svgplot escapes and truncates every one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from reports.colours import method_colours
from reports.svgplot import HEIGHT, INK, WIDTH, LegendEntry, LinearScale, LogScale, Panel, flops_label, legend, render

# seaborn.color_palette("colorblind").as_hex(), written out so that building a site imports no plotting library
COLOURBLIND = ("#0173b2", "#de8f05", "#029e73", "#d55e00", "#cc78bc", "#ca9161", "#fbafe4", "#949494",
               "#ece133", "#56b4e9")
PARTS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860")  # seaborn "deep", for stacked parts
KINDS = ("rollout", "score", "update")
# the kinds' colours: none is a phase's (PARTS), so the two panels' legends cannot be read across
KIND_COLOURS = ("#949494", "#ece133", "#fbafe4")  # colour-blind palette: grey, yellow, pink
_MAIN = (70, 34, WIDTH - 70 - 190, HEIGHT - 34 - 52)  # plot box leaving room for a legend on the right


def palette(names: Sequence[str]) -> dict[str, str]:
    """Each method's colour (`reports.colours.method_colour`), in the given order."""
    return method_colours(names)


def _positive(xs, *columns):
    """Rows of (x, *columns) with x > 0: a log axis has no place for the 0-FLOP base point."""
    return [row for row in zip(xs, *columns) if row[0] > 0]


def frontier(series: list[dict], segments: list[dict], envelope: dict | None) -> str:
    """The Pareto frontier of whole curves: every method's aggregate curve thin, the upper envelope thick.

    series: [{"name", "colour", "flops": [...], "acc": [...]}] aggregate curves from the first milestone;
    segments: [{"name", "colour", "start", "end"}] the stretches of FLOPs where one method is on top;
    envelope: {"flops": [...], "acc": [...]} the envelope's values, or None.
    A segment wide enough for its name is labelled with the method on top there.
    """
    xs = [f for s in series for f in s["flops"]]
    ys = [a for s in series for a in s["acc"]]
    panel = Panel(LogScale.nice(xs), LinearScale.accuracy(ys), _MAIN, "counted training FLOPs", "held-out accuracy")
    for s in series:
        panel.line(s["flops"], s["acc"], s["colour"], width=1.2, opacity=0.6)
    if envelope is not None and segments:
        ef, ea = np.asarray(envelope["flops"], dtype=float), np.asarray(envelope["acc"], dtype=float)
        span = math.log10(max(xs) / min(xs)) if xs and min(xs) > 0 else 1.0
        for seg in segments:
            keep = (ef >= seg["start"]) & (ef <= seg["end"])
            panel.line(ef[keep], ea[keep], seg["colour"], width=3.4)
            if keep.sum() and math.log10(seg["end"] / seg["start"]) >= 0.12 * span:
                mid = math.sqrt(seg["start"] * seg["end"])
                panel.text(mid, float(np.interp(math.log10(mid), np.log10(ef), ea)), seg["name"], anchor="middle",
                           limit=18, dy=-10)
    legend = [LegendEntry(s["name"], s["colour"]) for s in series]
    legend.append(LegendEntry("frontier (thick)", INK))
    return render([panel], "Pareto frontier of whole curves", legend,
                  "Each method's aggregate accuracy against counted FLOPs (thin) and their upper envelope (thick), "
                  "coloured by the method on top at each FLOP value.")


def flops_breakdown(bars: list[dict], groups: Sequence[str]) -> str:
    """Mean counted FLOPs per method as stacked horizontal bars: by phase group (left), by kind (right).

    bars: [{"name", "by_group": {group: flops}, "by_kind": {kind: flops}}].
    """
    n = max(len(bars), 1)
    height = 130 + 28 * n
    total = max([sum(b["by_group"].values()) for b in bars] + [1.0])
    panels, legends = [], []
    for i, (key, parts, colours, title) in enumerate((("by_group", groups, PARTS, "by phase"),
                                                       ("by_kind", KINDS, KIND_COLOURS, "by kind"))):
        x_scale = LinearScale(0, total * 1.02, fmt=lambda v: "0" if v == 0 else f"{v:.1e}".replace("e+", "e"))
        panel = Panel(x_scale, LinearScale(-0.5, n - 0.5), (140 + i * 280, 36, 230, 28 * n), f"counted FLOPs {title}",
                      y_ticks=False)
        used = [(part, colours[j % len(colours)]) for j, part in enumerate(parts)
                if any(b[key].get(part) for b in bars)]
        for row, b in enumerate(bars):
            y, left = n - 1 - row, 0.0
            for part, colour in used:
                v = b[key].get(part, 0.0)
                if v:
                    panel.rect(left, left + v, y - 0.32, y + 0.32, colour, f"{b['name']}: {part}, {v:.3g} FLOPs")
                    left += v
            if i == 0:
                panel.text(0, y, b["name"] + " ", limit=20)
        panels.append(panel)
        legends.append([LegendEntry(part, colour, "box") for part, colour in used])
    rows = legend(legends[0], 20, height - 38, horizontal=True) + legend(legends[1], 20, height - 18, horizontal=True)
    return render(panels, "Counted FLOPs by phase and by kind (mean over seeds)", (),
                  "Stacked bars of each method's counted FLOPs by phase group and by kind.", height=height, extra=rows)


def length_accuracy(points: list[dict]) -> str:
    """Mean response length against final accuracy, per method (intervals) and per run (dots).

    points: [{"name", "colour", "length", "length_low", "length_high", "acc", "acc_low", "acc_high",
    "run_length": [...], "run_acc": [...]}].
    """
    xs = [v for p in points for v in p["run_length"] + [p["length_low"], p["length_high"], p["length"]]
          if v is not None]
    ys = [v for p in points for v in p["run_acc"] + [p["acc_low"], p["acc_high"], p["acc"]] if v is not None]
    panel = Panel(LinearScale.nice(xs), LinearScale.accuracy(ys), _MAIN, "mean response length (tokens)",
                  "final held-out accuracy")
    legend = []
    for p in points:
        panel.points(p["run_length"], p["run_acc"], p["colour"])
    for p in points:
        if p["length"] is None or p["acc"] is None:
            continue
        xerr = (p["length_low"], p["length_high"]) if p["length_low"] is not None else None
        yerr = (p["acc_low"], p["acc_high"]) if p["acc_low"] is not None else None
        panel.errorbar(p["length"], p["acc"], p["colour"], xerr=xerr, yerr=yerr)
        legend.append(LegendEntry(p["name"], p["colour"], "marker"))
    return render([panel], "Response length against accuracy", legend,
                  "Each method's mean response length and final accuracy; dots are single runs.")


def method_curves(name: str, colour: str, runs: list[dict], series: dict, fit: dict | None) -> str:
    """One method's curves: each seed thin grey, the aggregate with its band, the ScaleRL fit dashed.

    runs: [{"seed", "flops": [...], "acc": [...]}]; series: {"grid", "mid", "band_grid", "low", "high"};
    fit: {"flops": [...], "acc": [...]} sampled from the fitted curve, or None.
    """
    xs = [f for r in runs for f in r["flops"] if f > 0] + [f for f in series["grid"] if f > 0]
    ys = [a for r in runs for a in r["acc"]] + list(series["mid"])
    p = Panel(LogScale.nice(xs), LinearScale.accuracy(ys), _MAIN, "counted training FLOPs", "held-out accuracy")
    for r in runs:
        rows = _positive(r["flops"], r["acc"])
        if rows:
            p.line(*zip(*rows), "#9a9a9a", width=0.8, opacity=0.7)
    if series["low"] is not None:
        rows = _positive(series["band_grid"], series["low"], series["high"])
        if rows:
            p.band(*zip(*rows), colour)
    rows = _positive(series["grid"], series["mid"])
    if rows:
        p.line(*zip(*rows), colour, width=2.4)
    legend = [LegendEntry(f"aggregate of {len(runs)} seeds", colour), LegendEntry("single seeds", "#9a9a9a")]
    if fit is not None:
        p.line(fit["flops"], fit["acc"], INK, width=1.1, dash="5 3")
        legend.append(LegendEntry("ScaleRL fit", INK, "dash"))
    return render([p], f"{name}: accuracy against FLOPs", legend,
                  "Held-out accuracy against counted FLOPs for every seed, the aggregate and its 95% band.")


def _pieces(codes: np.ndarray, values: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) index ranges of one phase code with every value present: the lines of one trace.

    codes, values: [S] a run's phase indices and one statistic (NaN where a step lacks it).
    """
    valid = ~np.isnan(values)
    cut = np.flatnonzero((codes[1:] != codes[:-1]) | (valid[1:] != valid[:-1])) + 1
    starts, ends = np.r_[0, cut], np.r_[cut, codes.size]
    return [(int(a), int(b)) for a, b in zip(starts, ends) if valid[a]]


def step_traces(name: str, traces: dict) -> str:
    """Per-step statistics against counted FLOPs: a small panel per statistic, every seed a line coloured by phase.

    traces: reports.method_page.step_series's output: {"stats", "phases", "runs": [{"seed", "flops" [S],
    "phase" [S] (indices into phases), "values": {stat: [S], NaN where missing}}]}.
    """
    stats, runs = traces["stats"], traces["runs"]
    cols = min(3, len(stats))
    rows = math.ceil(len(stats) / cols)
    cell_w, cell_h, plot_h = (WIDTH - 10) / cols, 162, 104
    colour = [PARTS[i % len(PARTS)] for i in range(len(traces["phases"]))]
    x_max = max([float(np.nanmax(r["flops"])) for r in runs if r["flops"].size] + [1.0])
    panels = []
    for j, stat in enumerate(stats):
        left, top = 10 + (j % cols) * cell_w + 52, 58 + (j // cols) * cell_h
        present = [v for v in (r["values"][stat] for r in runs) if np.isfinite(v).any()]
        y = LinearScale.nice([float(np.nanmin(v)) for v in present] + [float(np.nanmax(v)) for v in present])
        y.n_ticks = 4  # a small panel: fewer ticks than a full figure's five
        x = LinearScale(0.0, x_max * 1.02, fmt=flops_label, n_ticks=3)
        p = Panel(x, y, (left, top, cell_w - 52 - 14, plot_h), title=stat)
        by_colour: dict[str, list] = {}
        for r in runs:
            for a, b in _pieces(r["phase"], r["values"][stat]):
                by_colour.setdefault(colour[r["phase"][a]], []).append((r["flops"][a:b], r["values"][stat][a:b]))
        for c, pieces in by_colour.items():
            p.polylines(pieces, c, width=1.0, opacity=0.75)
        panels.append(p)
    height = 58 + rows * cell_h + 30
    entries = [LegendEntry(ph or "(no phase)", colour[i], "line") for i, ph in enumerate(traces["phases"][:8])]
    return render(panels, f"{name}: per-step traces against counted FLOPs", (),
                  f"Training statistics of every step of each of {len(runs)} seeds, coloured by ledger phase; "
                  "x: counted FLOPs after the step.", height=height,
                  extra=legend(entries, 20, height - 22, horizontal=True))


def study_recovery(groups: list[dict]) -> str:
    """A recovery study seed by seed: the points of the domain each student lost against GRPO / self-OPD.

    groups: [{"name", "colour", "lost": [points], "ratio": [...], "forgot": [bool]}], one per board. A seed
    whose student measurably forgot is a full dot, one that did not a faint one; 0 and infinity (an arm
    that never recovered) are drawn at the axis' ends.
    """
    xs = [v for g in groups for v in g["lost"]]
    ys = [v for g in groups for v in g["ratio"] if v is not None and 0 < v < math.inf] + [1.0]
    p = Panel(LinearScale.nice(xs + [0.0]), LinearScale.nice(ys + [0.0], floor=0.0), _MAIN,
              "points of the domain the student lost", "recovery FLOPs, GRPO / self-OPD")
    p.y.fmt = lambda v: f"{v:g}×"
    p.line([p.x.lo, p.x.hi], [1.0, 1.0], INK, width=1.0, dash="5 3")
    legend = []
    for g in groups:
        for forgot, opacity in ((False, 0.3), (True, 0.9)):
            kept = [(x, y) for x, y, f in zip(g["lost"], g["ratio"], g["forgot"]) if f == forgot and y is not None]
            if kept:
                p.points(*zip(*kept), g["colour"], r=4.5, opacity=opacity)
        legend.append(LegendEntry(g["name"], g["colour"], "marker"))
    legend.append(LegendEntry("equal cost", INK, "dash"))
    return render([p], "Recovery, seed by seed", legend,
                  "Each seed's GRPO / self-OPD recovery FLOPs against the points of the domain its student lost; full "
                  "dots are the seeds whose student measurably forgot, faint ones those where it did not.")


def study_curves(groups: list[dict], targets: list[tuple[str, float]]) -> str:
    """A claim-1 study seed by seed: each seed's held-out accuracy against counted FLOPs for joint GRPO and
    opd-multi, with joint GRPO's targets across (claim 1 reads where each curve first reaches them).

    groups: [{"name", "colour", "runs": [{"flops": [...], "acc": [...]}]}], one per method (and budget);
    targets: [(label, accuracy)].
    """
    xs = [f for g in groups for r in g["runs"] for f in r["flops"] if f > 0]
    ys = [a for g in groups for r in g["runs"] for a in r["acc"]] + [t for _, t in targets]
    p = Panel(LogScale.nice(xs), LinearScale.accuracy(ys), _MAIN, "counted training FLOPs", "held-out accuracy")
    for label, tau in targets:
        p.line([p.x.lo, p.x.hi], [tau, tau], INK, width=0.9, dash="4 3")
        p.text(p.x.lo, tau, label, anchor="start", dy=-7)
    legend = []
    for g in groups:
        for r in g["runs"]:
            rows = _positive(r["flops"], r["acc"])
            if rows:
                p.line(*zip(*rows), g["colour"], width=1.4, opacity=0.85)
        legend.append(LegendEntry(g["name"], g["colour"]))
    legend.append(LegendEntry("joint GRPO's targets", INK, "dash"))
    return render([p], "Accuracy against FLOPs, seed by seed", legend,
                  "Each seed's held-out accuracy against counted FLOPs, one line per run, with joint GRPO's "
                  "targets dashed: claim 1 reads the FLOPs at which each curve first reaches them.")


def study_shares(groups: list[dict]) -> str:
    """A distillation study seed by seed: each seed's share of its experts' FLOPs at the held-out plateau
    and at the stopping rule, with the band within a factor of two of the paper's share.

    groups: [{"name", "colour", "seeds": [...], "plateau": [...], "stop": [...], "paper": share}].
    """
    seeds = [s for g in groups for s in g["seeds"]]
    ys = [v for g in groups for v in g["plateau"] + g["stop"] if v is not None] + [2 * g["paper"] for g in groups]
    x = LinearScale.nice(seeds, pad=0.08)
    x.n_ticks = min(10, max(seeds) - min(seeds) + 1)  # whole seeds: a step of 1 or 2, never 2.5
    p = Panel(x, LinearScale.nice(ys + [0.0], floor=0.0), _MAIN, "seed", "distillation FLOPs / experts' FLOPs")
    p.y.fmt = lambda v: f"{100 * v:.0f}%"
    legend = []
    for g in groups:
        lo, hi = p.x.lo, p.x.hi
        p.band([lo, hi], [g["paper"] / 2] * 2, [2 * g["paper"]] * 2, g["colour"], opacity=0.1)
        p.line([lo, hi], [g["paper"]] * 2, g["colour"], width=1.0, dash="5 3")
        p.points(g["seeds"], g["plateau"], g["colour"], r=4.5, opacity=0.9)
        p.points(g["seeds"], g["stop"], g["colour"], r=4.5, opacity=0.3)
        legend.append(LegendEntry(g["name"], g["colour"], "marker"))
    legend.append(LegendEntry("the paper's share", INK, "dash"))
    return render([p], "Distillation's share, seed by seed", legend,
                  "Each seed's distillation FLOPs as a share of its experts', at the held-out plateau (full dots) and "
                  "at the stopping rule (faint); the band is within a factor of two of the paper's share.")
