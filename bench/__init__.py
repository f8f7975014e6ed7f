"""OPD-Bench engine: FLOP ledger, metered models, rollout, updates, runner, run store and CLI.

Importing `bench` sets `OMP_WAIT_POLICY=PASSIVE` unless the caller chose otherwise: spin-waiting
OpenMP threads on a busy 2-core machine make torch 5-20x slower (docs/design.md, Known pitfalls). It must happen
before torch is imported, which is why it lives here.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

__version__ = "0.1.0"
