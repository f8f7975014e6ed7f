"""One colour per method, the same on every page, tab and figure.

The built-in methods have fixed colours, mostly from seaborn's colour-blind palette
(`reports.plots.COLOURBLIND`), chosen so that related methods look related (the two GRPO baselines are
blues) and the ones the findings compare differ most; none is the grey of single seeds on a method
page. Any other name gets a colour derived from a hash of the name, so a plugin method keeps its
colour whatever board it is on and whatever else is on that board.

    method_colour("opd-multi")   -> "#029e73"
    method_colours(["grpo-joint", "my-plugin"]) -> {"grpo-joint": "#0173b2", "my-plugin": "#…"}

Every colour is a `#rrggbb` string made here, never text from a record, and reads on both the light
and the dark page background.
"""

from __future__ import annotations

import colorsys
import hashlib
from collections.abc import Iterable

FIXED = {
    "grpo-joint": "#0173b2",  # blue: the reference
    "grpo": "#56b4e9",  # sky blue: the other GRPO baseline
    "opd-multi": "#029e73",  # green
    "opd-external": "#d55e00",  # vermillion
    "self-grpo": "#cc78bc",  # reddish purple
    "sft": "#de8f05",  # orange
    "recover": "#8172b3",  # violet (seaborn's "deep"): self-grpo's recovery protocol, near its colour
}
_HUES = 36  # a hashed colour's hue is one of these (10 degrees apart)


def method_colour(name: str) -> str:
    """The method's colour: fixed for the built-in methods, derived from the name's hash otherwise."""
    fixed = FIXED.get(name)
    if fixed is not None:
        return fixed
    digest = hashlib.sha256(str(name).encode("utf-8", "surrogatepass")).digest()
    hue = (digest[0] * 256 + digest[1]) % _HUES / _HUES
    lightness = (0.40, 0.50)[digest[2] % 2]  # two levels: names with the same hue still differ
    r, g, b = colorsys.hls_to_rgb(hue, lightness, 0.62)
    return f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"


def method_colours(names: Iterable[str]) -> dict[str, str]:
    """{name: colour} in the given order (figure legends keep it)."""
    return {n: method_colour(n) for n in names}
