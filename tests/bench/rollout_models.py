"""Tiny random Llama and Qwen2 models and prompts (token ids) for the rollout tests.

They are initialised with a large weight scale so that next-token distributions are peaked: argmax
margins are then far above float noise, and greedy comparisons across batch shapes are meaningful.
"""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

VOCAB = 300
SMALL_VOCAB = 12
EOS = 1
PROMPT_LENGTHS = (3, 5, 5, 8, 2, 8, 11, 5)


def build_model(family: str, vocab: int = VOCAB) -> torch.nn.Module:
    shape = dict(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        initializer_range=0.2,
        bos_token_id=None,
        eos_token_id=None,  # each test picks its EOS
    )
    torch.manual_seed(0)
    if family == "llama":
        return LlamaForCausalLM(LlamaConfig(**shape)).eval()
    return Qwen2ForCausalLM(Qwen2Config(**shape)).eval()


def random_prompts(vocab: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(2, vocab, (n,), generator=g).tolist() for n in PROMPT_LENGTHS]
