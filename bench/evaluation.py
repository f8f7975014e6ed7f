"""Held-out evaluation (docs/metrics.md; docs/design.md, The run).

Greedy decoding, pass@1, on a fixed slice of each domain's held-out split; suite accuracy is the mean
over domains; response length is the mean number of generated tokens (EOS included). A held-out
evaluation is booked to the `eval` category: recorded and shown, never counted toward the budget. A
validation check a method runs to decide when to stop (`ctx.evaluate(split="validation")`) is part of
making its student, so it is counted (`counted=True`), booked to the method's phase as a rollout.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from bench.accounting.ledger import evaluation
from bench.policy import Policy
from bench.rollout.base import RolloutBackend
from bench.rollout.torch_engine import TorchRollout


class Evaluator:
    """Scores a policy on the first `size` problems of every domain of a suite (or of `domains`).

    `split`: `heldout` (what the leaderboard reports) or `validation` (a fixed sample of the training
    distribution, for methods that stop on a plateau). `counted`: book the work where the caller is
    (a method's phase, counted), not as a held-out evaluation.

    `backend` decodes; the runner passes the methods' own, so a vLLM run evaluates on its engine.
    """

    def __init__(
        self, suite: Any, size: int, max_new_tokens: int, batch_size: int = 512, backend: RolloutBackend | None = None,
        *, split: str = "heldout", domains: Sequence[str] | None = None, counted: bool = False,
    ) -> None:
        self.suite = suite
        self.counted = counted
        self.max_new_tokens = max_new_tokens
        self.batch_size = batch_size
        split_of = suite.heldout if split == "heldout" else suite.validation
        self.problems = {d: split_of(d)[:size] for d in (domains or suite.domains)}
        self.backend = backend or TorchRollout()

    def evaluate(self, policy: Policy, samples_per_domain: int = 0) -> dict:
        """{accuracy, domain_accuracy, mean_length, domain_mean_length} of greedy completions, and with
        `samples_per_domain` > 0 `samples`: the first held-out problems of each domain with their
        completion and reward (the same fixed prompts at every evaluation; no extra generation)."""
        domain_acc, domain_len, samples = {}, {}, []
        with contextlib.nullcontext() if self.counted else evaluation():
            for domain, problems in self.problems.items():
                texts, lengths = self.completions(policy, problems)
                scores = self.suite.score_many(problems, texts)
                domain_acc[domain] = sum(scores) / len(scores)
                domain_len[domain] = sum(lengths) / len(lengths)
                samples += [{"domain": domain, "prompt": p.prompt, "completion": t, "reward": float(r)}
                            for p, t, r in zip(problems[:samples_per_domain], texts, scores)]
        result = {
            "accuracy": sum(domain_acc.values()) / len(domain_acc),
            "domain_accuracy": domain_acc,
            "mean_length": sum(domain_len.values()) / len(domain_len),
            "domain_mean_length": domain_len,
        }
        return {**result, "samples": samples} if samples_per_domain > 0 else result

    def completions(self, policy: Policy, problems: list) -> tuple[list[str], list[int]]:
        texts, lengths = [], []
        for start in range(0, len(problems), self.batch_size):
            chunk = problems[start : start + self.batch_size]
            with policy._clock("rollout"):
                batch = self.backend.generate(
                    policy._model,
                    [policy.encode_prompt(p.prompt) for p in chunk],
                    n=1,
                    max_new_tokens=self.max_new_tokens,
                    eos_id=policy.stop_ids,
                    greedy=True,
                )
            texts += [policy.decode(ids) for ids in batch.completion_ids]
            lengths += [int(n) for n in batch.lengths]
        return texts, lengths


