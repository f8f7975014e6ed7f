"""OPD-Bench method plugin: RLOO (REINFORCE with leave-one-out baselines). See `rloo.py`."""

from opd_bench_rloo.rloo import RLOO, RLOOConfig, leave_one_out_advantages

__all__ = ["RLOO", "RLOOConfig", "leave_one_out_advantages"]
