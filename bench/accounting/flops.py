"""Analytic FLOP counts for decoder-only transformers, from a Hugging Face config (docs/design.md, FLOP accounting).

The ledger's unit. Per token, a forward costs 2 x (matmul parameters, LM head included, embeddings
excluded) plus 4 x layers x heads x head_dim x (keys attended); a backward costs 2 x forward. This is
the convention of Kaplan et al. and verl's counter (causal attention), not PaLM's 6N + 12LHQT.

    N_mm = L * [d * d_h * (2 n_q + 2 n_kv) + m * d * f] + V * d        (m = 3 for gated MLPs, else 2)

A call that feeds S new tokens after P cached ones attends S*P + S(S+1)/2 keys in total and, when only
the last `k` positions need logits (generation prefill), pays the LM head for k tokens only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench.errors import UnsupportedModelError

# model_type -> number of MLP matrices (gated MLPs have gate, up and down projections). Not gemma2:
# transformers runs its soft-capped attention eagerly only, which the models here never load.
_MLP_MATRICES = {
    "llama": 3,
    "qwen2": 3,
    "qwen3": 3,
    "mistral": 3,
    "gemma": 3,
    "phi3": 3,
    "olmo": 3,
    "olmo2": 3,
    "gpt2": 2,
    "gpt_neox": 2,
    "opt": 2,
}
SUPPORTED_FAMILIES = tuple(sorted(_MLP_MATRICES))


@dataclass(frozen=True)
class FlopSpec:
    """The shape numbers the formulas need, read once from a model config."""

    model_type: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    mlp_matrices: int

    @classmethod
    def from_config(cls, config: Any) -> FlopSpec:
        model_type = getattr(config, "model_type", None)
        if model_type not in _MLP_MATRICES:
            raise UnsupportedModelError(
                f"no FLOP formula for model_type={model_type!r}; supported: {', '.join(SUPPORTED_FAMILIES)}"
            )
        if model_type == "gpt2":
            hidden, layers, heads = config.n_embd, config.n_layer, config.n_head
            ffn = config.n_inner or 4 * hidden
            kv_heads, head_dim = heads, hidden // heads
        else:
            hidden, layers = config.hidden_size, config.num_hidden_layers
            heads = config.num_attention_heads
            kv_heads = getattr(config, "num_key_value_heads", None) or heads
            head_dim = getattr(config, "head_dim", None) or hidden // heads
            ffn = getattr(config, "intermediate_size", None) or config.ffn_dim  # OPT calls it ffn_dim
            if getattr(config, "word_embed_proj_dim", hidden) != hidden:
                raise UnsupportedModelError("OPT with word_embed_proj_dim != hidden_size adds projections")
        return cls(
            model_type=model_type,
            layers=layers,
            hidden=hidden,
            heads=heads,
            kv_heads=kv_heads,
            head_dim=head_dim,
            ffn=ffn,
            vocab=config.vocab_size,
            mlp_matrices=_MLP_MATRICES[model_type],
        )

    @property
    def body_params(self) -> int:
        """Matmul parameters of the transformer blocks (no embeddings, no LM head)."""
        attn = self.hidden * self.head_dim * (2 * self.heads + 2 * self.kv_heads)
        mlp = self.mlp_matrices * self.hidden * self.ffn
        return self.layers * (attn + mlp)

    @property
    def head_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def matmul_params(self) -> int:
        """N_mm (docs/design.md, FLOP accounting)."""
        return self.body_params + self.head_params

    @property
    def pair_flops(self) -> int:
        """QK^T and AV for one query-key pair, summed over layers and heads (a padded key charged)."""
        return 4 * self.layers * self.heads * self.head_dim

    def attention_flops(self, new_tokens: int, past_tokens: int = 0) -> int:
        """QK^T and AV for `new_tokens` queries after `past_tokens` cached keys (causal), one sequence."""
        keys = new_tokens * past_tokens + new_tokens * (new_tokens + 1) // 2
        return self.pair_flops * keys

    def forward_flops(
        self, new_tokens: int, past_tokens: int = 0, logit_tokens: int | None = None, batch: int = 1
    ) -> int:
        """One forward call over `batch` sequences of `new_tokens` each, after `past_tokens` in cache.

        `logit_tokens` is how many positions get LM-head logits (all when None).
        """
        if new_tokens <= 0 or batch <= 0:
            return 0
        logit_tokens = new_tokens if logit_tokens is None else min(logit_tokens, new_tokens)
        per_seq = (
            2 * self.body_params * new_tokens
            + 2 * self.head_params * logit_tokens
            + self.attention_flops(new_tokens, past_tokens)
        )
        return batch * per_seq

    def train_flops(self, tokens: int, batch: int = 1) -> int:
        """Forward + backward (backward = 2 x forward) over a full causal pass of `tokens`."""
        return 3 * self.forward_flops(tokens, batch=batch)

    def generate_flops(self, prompt_tokens: int, new_tokens: int) -> int:
        """Prefill of the prompt (last logit only), then one cached step per generated token but the last.

        The last generated token is never fed back, so the model processes P + G - 1 tokens.
        """
        total = self.forward_flops(prompt_tokens, logit_tokens=1)
        for step in range(1, new_tokens):
            total += self.forward_flops(1, past_tokens=prompt_tokens + step - 1)
        return total


# Dense bf16 tensor-core peaks (FLOP/s, no sparsity: half the data sheets' sparse figures) by a substring
# of `torch.cuda.get_device_name()`. Longest match wins ("H100 PCIe" before "H100"): the PCIe and NVL
# cards of a Hopper die run at lower clocks than its SXM module.
DEVICE_PEAK_BF16: dict[str, float] = {
    "H200": 989e12, "H200 NVL": 835e12, "H100 PCIe": 756e12, "H100 NVL": 835e12, "H100": 989e12,
    "H800 PCIe": 756e12, "H800": 989e12, "GH200": 989e12,
    "B200": 2250e12, "A100": 312e12, "A800": 312e12, "L40S": 362e12, "L40": 181e12, "L4": 121e12,
    "A10G": 70e12, "A10": 125e12, "RTX 4090": 165e12, "RTX 3090": 71e12,
}


def device_peak_flops(device_name: str | None) -> float | None:
    """The device's dense bf16 peak, or None where the hardware is not in the table."""
    if not device_name:
        return None
    matches = [k for k in DEVICE_PEAK_BF16 if k in device_name]
    return DEVICE_PEAK_BF16[max(matches, key=len)] if matches else None
