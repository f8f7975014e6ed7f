"""The `bench` command line: the composition root, the one engine package that names tasks and reports
(docs/design.md, Layers and lines).

    bench run --method opd-multi --suite math_code [--seed 0] [--budget 2e13] [--profile tiny] [--resume]
              [--rollout torch|vllm]
    bench prepare [--profile tiny]
    bench list methods|suites|profiles
    bench flops MODEL_OR_SPEC
    bench report [--runs runs/] [--out leaderboard/]
    bench check-adapter PLUGIN
    bench compare RUN_OR_RUNS... [--against leaderboard/records]
    bench export-lm-eval SUITE --out DIR
    bench export-hf SUITE --out DIR
    bench eval MODEL_DIR|RUN_DIR [--suite S] [--profile P] [--limit N] [--task LM_EVAL_TASK ...]
    bench sweep --methods A,B [--suites S] [--seeds N] [--executor local|ray [--address HOST:6379]] [--rollout ...]
    bench reproduce [--profile tiny] [--executor local|ray ...] [--rollout torch|vllm]

Bad input gets one line on stderr saying what was wrong and what is allowed, and exit status 2 (an
option click cannot parse gets click's usage box).

Commands by what they do: `runs` (run, prepare), `sweeps` (sweep, reproduce, report, compare) and
`tools` (list, flops, check-adapter, export-lm-eval, export-hf, eval); `common` holds the app and
the argument checks they share.
"""

from __future__ import annotations

from bench.cli import runs, sweeps, tools  # noqa: F401  (each registers its commands on the app)
from bench.cli.common import DEFAULT_PROFILE, app
from bench.cli.sweeps import shipped_profiles
from bench.cli.tools import audit_table

__all__ = ["DEFAULT_PROFILE", "app", "audit_table", "main", "shipped_profiles"]


def main() -> None:
    app()  # each command ends on Ctrl-C with one line of its own (`common.interrupts`)
