"""A small SVG chart writer: axes, ticks, lines, bands, points, error bars, bars and a legend.

Why not matplotlib for these: a 1,000-record site has ~110 of them (a curve per method page, and
the board's Pareto, FLOPs and length figures) and must build in 10 s on two shared cores; matplotlib
takes 0.1-0.3 s a figure on a loaded core, this writer under 2 ms. The board figures that are
statistics over seeds are seaborn's (`reports.figures`). Its output is plain, deterministic SVG text: every
string goes through XML escaping (`_esc`), nothing is executable, and fonts match the site's. Its style
has a dark variant (`prefers-color-scheme: dark`, which a figure shown by an <img> follows too), and
lines drawn in INK take the text's colour in either. Accuracy axes (`LinearScale.accuracy`) stay in
[0, 1] and span at least ACC_MIN_SPAN, so a run stuck at 0 gets an axis, not one of ±5e-11.

    p = Panel(x=LogScale(1e12, 3e14), y=LinearScale(0.2, 0.7), box=(60, 20, 420, 300))
    p.line(xs, ys, colour="#0173b2"); svg = render([p], legend=[...], title="...")
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from xml.sax.saxutils import escape

import numpy as np

WIDTH, HEIGHT = 680, 360
_STYLE = ("svg{color:#222}text{font-family:system-ui,-apple-system,'Segoe UI',Roboto,Helvetica,Arial,sans-serif;"
          "font-size:11px;fill:#333}.t{font-size:13px;font-weight:600;fill:#1d2330}.m{fill:#5b6475}"
          "path{fill:none}.g{stroke:#e3e6ec;stroke-width:1}.a{stroke:#8a909c;stroke-width:1}.bg{fill:#fff}"
          ".ring{stroke:#fff}"
          # the dark variant, for a page (or a browser) in the dark colour scheme: an <img> follows it too
          "@media (prefers-color-scheme:dark){svg{color:#e6e8ec}text{fill:#d5d9e0}.t{fill:#eef0f4}.m{fill:#a3abb9}"
          ".g{stroke:#343a46}.bg{fill:#1b1f27}.ring{stroke:#1b1f27}}")
INK = "currentColor"  # lines that are not a method's (a fit, a legend key): the text colour, light or dark
ACC_MIN_SPAN = 0.1  # an accuracy axis spans at least this, inside [0, 1]
_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")  # characters XML 1.0 forbids


def _esc(text: object, limit: int = 60) -> str:
    """Untrusted text for an SVG text node or attribute: truncated, XML-escaped, quotes included."""
    s = _NOT_XML.sub("\ufffd", str(text))
    s = s if len(s) <= limit else s[: limit - 1] + "…"
    return escape(s, {'"': "&quot;", "'": "&#39;"})


def _n(v: float) -> str:
    return f"{float(v):.1f}"


def flops_label(value: float) -> str:
    """3e13 -> '3×10¹³'; 1e14 -> '10¹⁴'."""
    if value <= 0 or not math.isfinite(value):
        return "0"
    exp = math.floor(math.log10(value) + 1e-9)
    mant = value / 10**exp
    power = "10" + str(exp).translate(_SUPERSCRIPT)
    return power if abs(mant - 1) < 1e-6 else f"{mant:.2g}×{power}"


SCALE_LIMIT = 1e300


@dataclass
class LinearScale:
    lo: float
    hi: float
    fmt: Callable[[float], str] | None = None  # tick label format; default 3 significant digits
    n_ticks: int = 5  # about this many ticks (fewer for a small panel)

    def __post_init__(self) -> None:
        # A span near the float limit (a diverged loss of 1e308) would overflow to inf: such values
        # are drawn at the edge of a scale kept within +-1e300.
        self.lo, self.hi = (min(max(float(v), -SCALE_LIMIT), SCALE_LIMIT) for v in (self.lo, self.hi))
        if not self.hi > self.lo:
            pad = abs(self.lo) * 0.1 or 1.0
            self.lo, self.hi = self.lo - pad, self.hi + pad

    def frac(self, v):
        """Position in [0, 1] of a value, or of an array of values."""
        return (np.asarray(v, dtype=float) - self.lo) / (self.hi - self.lo)

    def ticks(self, target: int | None = None) -> list[float]:
        raw = (self.hi - self.lo) / (target or self.n_ticks)
        mag = 10.0 ** math.floor(math.log10(raw))
        step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
        first = math.ceil(self.lo / step - 1e-9) * step
        return [round(first + i * step, 12) for i in range(int((self.hi - first) / step + 1e-9) + 1)]

    def label(self, v: float) -> str:
        return self.fmt(v) if self.fmt else f"{v:.3g}"

    @staticmethod
    def nice(values: Sequence[float], pad: float = 0.05, floor: float | None = None, ceil: float | None = None,
             min_span: float = 0.0) -> LinearScale:
        """A scale around the finite values, padded by `pad` of their span, kept inside [floor, ceil].

        Equal values (a newcomer's smoke run at accuracy 0) get a readable span: at least `min_span`,
        else a tenth of their size each side (1 each side of 0), never a span of floating-point noise.
        """
        vals = [v for v in values if v is not None and math.isfinite(v)] or [0.0, 1.0]
        lo, hi = min(vals), max(vals)
        if hi - lo < min_span:
            mid = (lo + hi) / 2
            lo, hi = mid - min_span / 2, mid + min_span / 2
        elif hi - lo <= 1e-9 * max(1.0, abs(lo), abs(hi)):
            half = abs(hi) * 0.1 or 1.0
            lo, hi = lo - half, hi + half
        span = hi - lo
        lo, hi = lo - pad * span, hi + pad * span
        lo, hi = lo if floor is None else max(lo, floor), hi if ceil is None else min(hi, ceil)
        if hi - lo < min_span:  # clamped at an end: extend from it
            lo, hi = (lo, lo + min_span) if floor is not None and lo == floor else (hi - min_span, hi)
        return LinearScale(lo, hi)

    @staticmethod
    def accuracy(values: Sequence[float]) -> LinearScale:
        """An accuracy axis: inside [0, 1], at least ACC_MIN_SPAN wide."""
        return LinearScale.nice(values, floor=0.0, ceil=1.0, min_span=ACC_MIN_SPAN)


@dataclass
class LogScale:
    lo: float
    hi: float

    def __post_init__(self) -> None:
        self.lo = max(self.lo, 1e-300)
        if not self.hi > self.lo * 1.0001:
            self.lo, self.hi = self.lo / 2, self.lo * 2

    def frac(self, v):
        """Position in [0, 1] of a value, or of an array of values, in log10."""
        logs = np.log10(np.maximum(np.asarray(v, dtype=float), 1e-300))
        return (logs - math.log10(self.lo)) / (math.log10(self.hi) - math.log10(self.lo))

    def ticks(self, target: int = 5) -> list[float]:
        lo_e, hi_e = math.floor(math.log10(self.lo)), math.ceil(math.log10(self.hi))
        for subs in ((1,), (1, 3), (1, 2, 5), (1, 2, 3, 5, 7)):
            # floats: integer powers of ten past int64 would make a plotting library's arrays of objects
            ticks = [t for t in (m * 10.0**e for e in range(lo_e, hi_e + 1) for m in subs)
                     if self.lo <= t <= self.hi * 1.0001]
            if len(ticks) >= 3 or subs == (1, 2, 3, 5, 7):
                return ticks[:: max(1, len(ticks) // (target + 2))]
        return []  # pragma: no cover

    def label(self, v: float) -> str:
        return flops_label(v)

    @staticmethod
    def nice(values: Sequence[float]) -> LogScale:
        vals = [v for v in values if v is not None and math.isfinite(v) and v > 0] or [1.0, 10.0]
        return LogScale(min(vals) / 1.25, max(vals) * 1.25)


@dataclass
class Panel:
    """One plotting area: box = (left, top, width, height) in SVG pixels; y grows upward."""

    x: LinearScale | LogScale
    y: LinearScale | LogScale
    box: tuple[float, float, float, float]
    xlabel: str = ""
    ylabel: str = ""
    y_ticks: bool = True
    title: str = ""  # drawn above the box: a small multiple's name
    parts: list[str] = field(default_factory=list)

    def px(self, v):
        """SVG x of a data value (or array); values far outside the axis are pinned just past its end."""
        return self.box[0] + self.box[2] * np.clip(self.x.frac(v), -0.05, 1.05)

    def py(self, v):
        return self.box[1] + self.box[3] * (1 - np.clip(self.y.frac(v), -0.05, 1.05))

    def _coords(self, xs, ys) -> list[str]:
        """'x,y' strings for points, vectorised: figures of a 1,000-run site have ~10^6 points.

        Points with a missing (None or NaN) coordinate are left out.
        """
        if isinstance(xs, np.ndarray) and isinstance(ys, np.ndarray):
            x, y = xs.astype(float), ys.astype(float)
        else:
            pairs = [(a, b) for a, b in zip(xs, ys) if a is not None and b is not None]
            if not pairs:
                return []
            x, y = np.array(pairs, dtype=float).T
        keep = ~(np.isnan(x) | np.isnan(y))
        xy = np.empty(2 * int(keep.sum()))
        xy[0::2], xy[1::2] = self.px(x[keep]), self.py(y[keep])
        # one %-format over the whole array: ~2x faster than an f-string per point
        return (("%.1f,%.1f\n" * (xy.size // 2)) % tuple(xy.tolist())).split("\n")[:-1]

    def line(self, xs, ys, colour: str, width: float = 1.6, dash: str = "", opacity: float = 1.0) -> None:
        pts = " ".join(self._coords(xs, ys))
        if pts:
            extra = f' stroke-dasharray="{dash}"' if dash else ""
            self.parts.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="{width}"'
                              f' stroke-opacity="{opacity}" stroke-linejoin="round"{extra}/>')

    def polylines(self, pieces: Sequence[tuple[np.ndarray, np.ndarray]], colour: str, width: float = 1.0,
                  opacity: float = 1.0) -> None:
        """Unconnected lines of one colour as one SVG path: a figure with thousands of short traces stays
        one element per colour, and its points are formatted in one call. pieces: [(xs [n], ys [n])]."""
        clean = []
        for xs, ys in pieces:
            x, y = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
            keep = ~(np.isnan(x) | np.isnan(y))
            if keep.sum() > 1:  # one point draws nothing
                clean.append((x[keep], y[keep]))
        if not clean:
            return
        coords = self._coords(np.concatenate([x for x, _ in clean]), np.concatenate([y for _, y in clean]))
        d, start = [], 0
        for x, _ in clean:
            d.append(f"M{coords[start]}L{' '.join(coords[start + 1:start + x.size])}")
            start += x.size
        self.parts.append(f'<path d="{"".join(d)}" stroke="{colour}" stroke-width="{width}" '
                          f'stroke-opacity="{opacity}" stroke-linejoin="round"/>')

    def band(self, xs, lo, hi, colour: str, opacity: float = 0.16) -> None:
        upper, lower = self._coords(xs, hi), self._coords(xs, lo)
        if upper:
            points = " ".join(upper + lower[::-1])
            self.parts.append(f'<polygon points="{points}" fill="{colour}" fill-opacity="{opacity}"/>')

    def points(self, xs, ys, colour: str, r: float = 2.2, opacity: float = 0.4) -> None:
        for xy in self._coords(xs, ys):
            cx, cy = xy.split(",")
            self.parts.append(f'<circle cx="{cx}" cy="{cy}" r="{r}" fill="{colour}" fill-opacity="{opacity}"/>')

    def errorbar(self, x, y, colour: str, xerr=None, yerr=None, r: float = 4.5) -> None:
        """A marker at (x, y) with interval whiskers; xerr / yerr = (low, high) or None."""
        cx, cy = self.px(x), self.py(y)
        if yerr is not None:
            a, b = self.py(yerr[0]), self.py(yerr[1])
            self.parts.append(f'<path d="M{_n(cx)} {_n(a)}V{_n(b)}M{_n(cx - 3)} {_n(a)}h6M{_n(cx - 3)} {_n(b)}h6" '
                              f'stroke="{colour}" stroke-width="1.3"/>')
        if xerr is not None:
            a, b = self.px(xerr[0]), self.px(xerr[1])
            self.parts.append(f'<path d="M{_n(a)} {_n(cy)}H{_n(b)}M{_n(a)} {_n(cy - 3)}v6M{_n(b)} {_n(cy - 3)}v6" '
                              f'stroke="{colour}" stroke-width="1.3"/>')
        self.parts.append(f'<circle class="ring" cx="{_n(cx)}" cy="{_n(cy)}" r="{r}" fill="{colour}" '
                          f'stroke="#fff" stroke-width="1"/>')

    def rect(self, x0: float, x1: float, y0: float, y1: float, colour: str, title: str = "") -> None:
        """A bar between data coordinates (x0, y0) and (x1, y1), with an optional hover title."""
        left, right = sorted((self.px(x0), self.px(x1)))
        top, bottom = sorted((self.py(y1), self.py(y0)))
        tip = f"<title>{_esc(title, 120)}</title>" if title else ""
        self.parts.append(f'<rect x="{_n(left)}" y="{_n(top)}" width="{_n(right - left)}" height="{_n(bottom - top)}"'
                          f' fill="{colour}">{tip}</rect>')

    def text(self, x: float, y: float, label: str, anchor: str = "end", limit: int = 24, dy: float = 0.0) -> None:
        """A label at data coordinates (x, y), moved dy pixels down (negative: up)."""
        self.parts.append(f'<text x="{_n(self.px(x))}" y="{_n(self.py(y) + dy)}" text-anchor="{anchor}" '
                          f'dominant-baseline="middle">{_esc(label, limit)}</text>')

    def axes(self) -> str:
        left, top, w, h = self.box
        out = []
        for t in self.y.ticks() if self.y_ticks else ():
            y = self.py(t)
            out.append(f'<path class="g" d="M{_n(left)} {_n(y)}h{_n(w)}"/><text class="m" x="{_n(left - 6)}" '
                       f'y="{_n(y)}" text-anchor="end" dominant-baseline="middle">{_esc(self.y.label(t))}</text>')
        for t in self.x.ticks():
            x = self.px(t)
            out.append(f'<path class="g" d="M{_n(x)} {_n(top)}v{_n(h)}"/><text class="m" x="{_n(x)}" '
                       f'y="{_n(top + h + 16)}" text-anchor="middle">{_esc(self.x.label(t))}</text>')
        out.append(f'<path class="a" d="M{_n(left)} {_n(top)}V{_n(top + h)}H{_n(left + w)}"/>')
        if self.title:
            out.append(f'<text x="{_n(left)}" y="{_n(top - 8)}" font-weight="600">{_esc(self.title, 40)}</text>')
        if self.xlabel:
            out.append(f'<text x="{_n(left + w / 2)}" y="{_n(top + h + 34)}" '
                       f'text-anchor="middle">{_esc(self.xlabel, 80)}</text>')
        if self.ylabel:
            cx, cy = left - 44, top + h / 2
            out.append(f'<text x="{_n(cx)}" y="{_n(cy)}" text-anchor="middle" '
                       f'transform="rotate(-90 {_n(cx)} {_n(cy)})">{_esc(self.ylabel, 60)}</text>')
        return "".join(out)

    def svg(self) -> str:
        return self.axes() + "".join(self.parts)


@dataclass
class LegendEntry:
    label: str
    colour: str
    kind: str = "line"  # line | dash | dot | box | marker


def legend(entries: Sequence[LegendEntry], x: float, y: float, horizontal: bool = False) -> str:
    """Legend entries from (x, y): stacked downward, or in a row (widths estimated from label length)."""
    out = []
    cx = x
    for i, e in enumerate(entries):
        cy = y if horizontal else y + i * 17
        x, cx = (cx, cx + 34 + 6.2 * min(len(e.label), 24)) if horizontal else (x, cx)
        if e.kind in ("line", "dash", "dot"):
            dash = {"line": "", "dash": ' stroke-dasharray="5 3"', "dot": ' stroke-dasharray="2 3"'}[e.kind]
            out.append(f'<path d="M{_n(x)} {_n(cy)}h18" stroke="{e.colour}" stroke-width="2"{dash}/>')
        elif e.kind == "box":
            out.append(f'<rect x="{_n(x + 3)}" y="{_n(cy - 5)}" width="12" height="10" fill="{e.colour}"/>')
        else:
            out.append(f'<circle cx="{_n(x + 9)}" cy="{_n(cy)}" r="4.5" fill="{e.colour}"/>')
        out.append(f'<text x="{_n(x + 24)}" y="{_n(cy)}" dominant-baseline="middle">{_esc(e.label, 24)}</text>')
    return "".join(out)


def render(panels: Sequence[Panel], title: str, entries: Sequence[LegendEntry] = (), description: str = "",
           width: int = WIDTH, height: int = HEIGHT, extra: str = "") -> str:
    """The SVG document: title on top, panels, legend entries right of the last panel, `extra` SVG."""
    leg = ""
    if entries and panels:
        left, top, w, _ = panels[-1].box
        leg = legend(entries, left + w + 14, top + 6)
    body = "".join(p.svg() for p in panels) + extra
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}"'
            f' role="img"><title>{_esc(title, 120)}</title><desc>{_esc(description, 300)}</desc>'
            f'<style>{_STYLE}</style><rect class="bg" width="100%" height="100%" fill="#fff"/>'
            f'<text class="t" x="12" y="20">{_esc(title, 90)}</text>{body}{leg}</svg>\n')
