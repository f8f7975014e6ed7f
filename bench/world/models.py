"""Models and tokenizers: load any local Hugging Face causal LM (a folder, or a hub id already in the
local Hugging Face cache), or build a tiny one from a named spec.

Tiny models are built deterministically (seeded random init) with a byte-level BPE tokenizer that has
the 256-byte alphabet and no merges: every character of a task prompt is one token, so no merge can
glue task symbols together, and spaces survive (a char-level WordLevel tokenizer loses them under
Qwen2 in transformers 5.x). Built models are cached under `$OPD_BENCH_CACHE/models/` (default
`~/.cache/opd-bench`); nothing is ever downloaded.

    python -m bench.world.models tiny-llama      # build (or find) a spec and print its folder
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import huggingface_hub
import torch
from huggingface_hub.errors import HFValidationError
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerFast,
)
from transformers.utils import logging as transformers_logging

from bench import store
from bench.errors import RunError, UnknownModelError, no_space

# No "Loading weights" bar in a run's output or an error's one line. Importing `bench` asks the hub
# for no bars, but transformers reads that once, when it is first imported, which a caller (a
# script, a test, lm-eval) may have done before importing `bench`.
transformers_logging.disable_progress_bar()

PAD, EOS, BOS = "<pad>", "<eos>", "<bos>"
# What a hub model id looks like (`org/name` or `name`); anything else is only ever a path.
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")


def cache_root() -> Path:
    """Where built models, suites and prepared checkpoints live (env `OPD_BENCH_CACHE`; unset or empty:
    ~/.cache/opd-bench, as the task caches)."""
    return Path(os.environ.get("OPD_BENCH_CACHE") or Path.home() / ".cache" / "opd-bench")


@dataclass(frozen=True)
class TinySpec:
    """Shape of a tiny decoder-only model; `family` is a transformers model_type."""

    family: str = "llama"
    layers: int = 2
    hidden: int = 128
    heads: int = 4
    kv_heads: int = 2
    ffn: int = 384
    max_positions: int = 256
    tie_embeddings: bool = True
    seed: int = 0

    def digest(self) -> str:
        payload = json.dumps({"spec": asdict(self), "tokenizer": "bytebpe-v1"}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:12]


TINY_SPECS: dict[str, TinySpec] = {
    # the student of the tiny profile (~0.5M parameters)
    "tiny-llama": TinySpec(),
    "tiny-qwen2": TinySpec(family="qwen2"),
    # the external teacher: >= 4x the student's parameters
    "tiny-llama-teacher": TinySpec(layers=4, hidden=192, heads=6, kv_heads=2, ffn=576, seed=1),
    # the worked-answer world (profile `tiny`): a ~1.3M student (and its experts), a ~6M (4.7x)
    # external teacher; head dim 32 (vLLM's CPU attention needs at least 32)
    "tiny-worked": TinySpec(layers=5, hidden=128, heads=4, kv_heads=2, ffn=512),
    "tiny-worked-teacher": TinySpec(layers=6, hidden=256, heads=8, kv_heads=4, ffn=1024, seed=1),
    # about 12M parameters, for benchmarks
    "small-llama": TinySpec(layers=6, hidden=384, heads=6, kv_heads=2, ffn=1024, seed=2),
    # the GPU learning check (profile `gpu-small`): a ~25M student, a ~118M (4.7x) external teacher
    "gpu-small": TinySpec(layers=8, hidden=512, heads=8, kv_heads=4, ffn=1536),
    "gpu-small-teacher": TinySpec(layers=10, hidden=1024, heads=16, kv_heads=8, ffn=2816, seed=1),
}


def build_tokenizer() -> PreTrainedTokenizerFast:
    """Byte-level BPE over the 256-byte alphabet, no merges, plus pad/eos/bos specials."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {PAD: 0, EOS: 1, BOS: 2}
    for ch in alphabet:
        vocab[ch] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token=PAD, eos_token=EOS, bos_token=BOS, model_max_length=4096
    )
    fast.padding_side = "left"
    return fast


def _config(spec: TinySpec, vocab_size: int, tokenizer: PreTrainedTokenizerFast):
    kwargs = dict(
        vocab_size=vocab_size,
        hidden_size=spec.hidden,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads,
        num_key_value_heads=spec.kv_heads,
        intermediate_size=spec.ffn,
        max_position_embeddings=spec.max_positions,
        tie_word_embeddings=spec.tie_embeddings,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    if spec.family == "qwen3":
        kwargs["head_dim"] = spec.hidden // spec.heads
    return AutoConfig.for_model(spec.family, **kwargs)


def build_tiny(spec: TinySpec) -> tuple[PreTrainedModel, PreTrainedTokenizerFast]:
    """A freshly initialised model and its tokenizer; same spec, same weights."""
    tokenizer = build_tokenizer()
    vocab_size = -(-len(tokenizer) // 8) * 8  # round up: friendlier matmul shapes
    config = _config(spec, vocab_size, tokenizer)
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(spec.seed)
    try:
        model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    finally:
        torch.random.set_rng_state(generator_state)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def tiny_model_dir(name: str) -> Path:
    """Build the named tiny spec once and return its cached folder."""
    if name not in TINY_SPECS:
        raise UnknownModelError(name, sorted(TINY_SPECS))
    spec = TINY_SPECS[name]
    folder = cache_root() / "models" / f"{name}-{spec.digest()}"
    if not (folder / "config.json").exists():
        with store.building(folder):  # `save_model` replaces the folder
            if not (folder / "config.json").exists():
                model, tokenizer = build_tiny(spec)
                save_model(model, tokenizer, folder)
    return folder


def save_model(model: PreTrainedModel, tokenizer, folder: Path) -> None:
    """Write model and tokenizer to `folder` atomically (a half-written folder is never visible, nor left
    behind; a full disk is an `OSError` ENOSPC naming the folder, whatever the writer raised)."""
    folder = Path(folder)
    tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if no_space(exc) and not isinstance(exc, OSError):  # safetensors says so in words only
            raise OSError(errno.ENOSPC, str(exc), str(folder)) from exc
        raise
    folder.parent.mkdir(parents=True, exist_ok=True)
    if folder.exists():
        shutil.rmtree(folder)
    os.replace(tmp, folder)


def hub_snapshot(repo_id: str) -> Path | None:
    """The folder of a hub model id in the local Hugging Face cache (`HF_HUB_CACHE`), or None; offline."""
    if not _HUB_ID.fullmatch(repo_id):
        return None
    try:
        folder = Path(huggingface_hub.snapshot_download(repo_id, local_files_only=True))
    except (HFValidationError, OSError):  # not cached (LocalEntryNotFoundError), incomplete, or not an id
        return None
    return folder if (folder / "config.json").exists() else None


def resolve_model(name_or_path: str | Path) -> Path:
    """A tiny spec name, a local folder holding a HF causal LM, a run directory (its `final/`), or a hub
    id (`org/name`) already in the local Hugging Face cache; clear errors otherwise (`RunError` for a
    run that has not finished). Nothing is downloaded."""
    name = str(name_or_path)
    if name in TINY_SPECS:
        return tiny_model_dir(name)
    path = Path(name_or_path)
    if is_run_dir(path):  # its deliverable
        if not (path / "final" / "config.json").exists():
            raise RunError(f"{path} is a run directory without a final/ model: the run has not finished "
                           "(finish it with `bench run ... --resume`)")
        return path / "final"
    if path.is_dir():
        if not (path / "config.json").exists():
            raise UnknownModelError(name, sorted(TINY_SPECS), missing_path=True)
        return path
    cached = hub_snapshot(name)
    if cached is None:
        looked_up = huggingface_hub.constants.HF_HUB_CACHE if _HUB_ID.fullmatch(name) else None
        raise UnknownModelError(name, sorted(TINY_SPECS), missing_path=True, hub_cache=looked_up)
    return cached


def is_run_dir(path: Path) -> bool:
    """Whether `path` is a run's directory (`runs/<run_id>/`): it has a ledger, or a config.json that is a
    run's (with its fingerprint), not a model's. A model folder with a `final/` of its own is no run."""
    if (path / "ledger.jsonl").is_file():
        return True
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and "fingerprint" in config and "run_id" in config


def load_model(
    name_or_path: str | Path, *, device: str = "cpu", dtype: torch.dtype | None = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerFast]:
    """Load a causal LM and its tokenizer from a local folder (or a tiny spec name). No downloads."""
    folder = resolve_model(name_or_path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(
            folder, local_files_only=True, dtype=dtype or torch.float32, attn_implementation="sdpa"
        ).to(device)
    except RunError:
        raise
    except Exception as exc:  # a broken config.json, truncated weights (SafetensorError), ...: the folder's fault
        raise load_error(folder, exc) from exc
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def load_error(folder: Path, exc: Exception) -> RunError:
    """The one line for a model folder that cannot be loaded (`exc`: what loading it raised)."""
    why = (str(exc).strip().splitlines() or [""])[0][:200]
    return RunError(f"cannot load the model in {folder} ({type(exc).__name__}: {why}); repair or replace the folder")


def param_count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def state_digest(model: torch.nn.Module) -> str:
    """A short content hash of a model's weights (for provenance), of any dtype: their bytes as they lie
    in memory (numpy has no bfloat16, so they are read as bytes, which for the dtypes numpy has are
    exactly its `tobytes()`)."""
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


if __name__ == "__main__":
    print(tiny_model_dir(sys.argv[1] if len(sys.argv) > 1 else "tiny-llama"))
