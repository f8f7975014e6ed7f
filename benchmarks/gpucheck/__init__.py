"""The GPU check's parts (`benchmarks/gpu_check.py` runs them), a module each."""
