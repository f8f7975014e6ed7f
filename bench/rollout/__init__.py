"""Rollout: sampling completions with their log-probs, every forward pass charged to the ledger.

`base` is the contract (`RolloutBatch`, `RolloutBackend`, `to_padded`); `torch_engine` the PyTorch
engine with its KV-cache pieces in `kv`; `vllm_engine` the vLLM one; `engines.make_backend` picks one.
"""
