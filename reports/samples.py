"""A run's sample completions (the record's optional `samples`, docs/records.md) for its method page.

Samples are grouped by the evaluation they were scored at (their counted FLOPs), in order; the page
shows one collapsible block per evaluation with the last one open. A record may hold 5,000 samples
of 4,000 characters: a page shows at most MAX_EVALUATIONS evaluations of a run (the last one and
others evenly spread) and MAX_PER_EVALUATION samples of each, and says how many more the record file
holds. Prompts and completions are untrusted text. The list of an evaluation's samples is written
here, each string through markupsafe's `escape` (what Jinja's autoescape calls): a thousand-record
site has tens of thousands of samples on its pages, and a template loop over them took three times as long.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
from markupsafe import Markup, escape

from reports.formatting import fmt

MAX_EVALUATIONS = 32
MAX_PER_EVALUATION = 24


def _kept(n: int, limit: int) -> list[int]:
    """Indices of the evaluations shown: all of them, or `limit` evenly spread with the first and last."""
    if n <= limit:
        return list(range(n))
    return sorted(set(np.linspace(0, n - 1, limit).round().astype(int).tolist()))


def _items(samples: list[dict[str, Any]]) -> Markup:
    """The <li> of each sample: domain, reward, prompt, completion; every record string escaped."""
    return Markup("".join(
        f'<li class="sample"><p class="sample-meta">{escape(s["domain"])} · reward <span class="reward'
        f'{" right" if s["reward"] >= 1.0 else ""}">{fmt(s["reward"], "reward")}</span></p>'
        f'<pre class="prompt">{escape(s["prompt"])}</pre><pre class="completion">{escape(s["completion"])}</pre></li>\n'
        for s in samples))


def samples_view(record: dict[str, Any]) -> dict[str, Any] | None:
    """The page's view of one run's samples, or None when the record has none.

    Returns:
        {"total": number of samples, "hidden_evaluations": evaluations not shown, "evaluations": [{"flops", "base"
        (at 0 FLOPs: the base model),
        "share" (of the budget), "accuracy" (the curve's, where an evaluation ran at those FLOPs), "n",
        "mean_reward", "open" (the last), "more" (samples not shown), "list_html": the samples shown, as
        escaped HTML list items}]}
    """
    samples = record.get("samples") or []
    if not samples:
        return None
    by_flops: dict[float, list[dict]] = defaultdict(list)
    for s in samples:
        by_flops[float(s["flops"])].append(s)
    accuracy = {float(p["flops"]): p["accuracy"] for p in record["curve"]}
    budget = float(record["budget_flops"])
    flops = sorted(by_flops)
    kept = _kept(len(flops), MAX_EVALUATIONS)
    evaluations = []
    for i in kept:
        group = by_flops[flops[i]]
        shown = group[:MAX_PER_EVALUATION]
        evaluations.append({
            "flops": fmt(flops[i], "flops"), "share": fmt(flops[i] / budget, "pct"), "base": flops[i] == 0,
            "accuracy": fmt(accuracy[flops[i]], "acc") if flops[i] in accuracy else None,
            "n": len(group), "mean_reward": fmt(sum(s["reward"] for s in group) / len(group), "acc"),
            "open": i == len(flops) - 1, "more": len(group) - len(shown),
            "list_html": _items(shown),
        })
    return {"total": len(samples), "hidden_evaluations": len(flops) - len(kept), "evaluations": evaluations}
