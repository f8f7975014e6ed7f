"""The `hf` profile's models: any local Hugging Face causal LM folders, nothing built, nothing downloaded.

    bench run --profile hf --model ./qwen2-0.5b --external ./qwen2-1.5b-instruct --device cuda ...

The student is `--model`; `--external PATH` is the external teacher and `--teacher DOMAIN=PATH` adds a
named teacher (`ctx.teacher("math")`). Their own training happened elsewhere and its cost is unknown:
nothing is booked `shared` or `external` for them, and the record says so (`flops.shared == 0`).
On CUDA the models load in bf16; on CPU in fp32.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from bench.accounting.ledger import Ledger
from bench.errors import ConfigError
from bench.world.models import load_model, resolve_model
from bench.policy import Policy


def _dtype(device: str) -> torch.dtype:
    return torch.bfloat16 if device.startswith("cuda") else torch.float32


# what a model folder's numbers depend on: config, weights and every kind of tokenizer file (a
# SentencePiece model, the chat template transformers saves apart, BPE merges, a WordPiece vocabulary);
# other text files (notes, a licence) are not the model
MODEL_SUFFIXES = (".json", ".safetensors", ".bin", ".model", ".jinja", ".tiktoken")
TOKENIZER_TEXT = frozenset({"merges.txt", "vocab.txt"})


def folder_digest(folder: Path, suffixes: tuple[str, ...] = MODEL_SUFFIXES) -> str:
    """A content hash of a model folder: the names and every byte of its config, tokenizer and weight
    files (SHA-256: about 1.2 GB/s from the page cache on one core here, a second for a 0.5B model in bf16);
    `suffixes=(".json",)`: of its config and tokenizer files alone."""
    h = hashlib.sha256()
    for f in sorted(Path(folder).iterdir()):
        if f.suffix not in suffixes and not (suffixes == MODEL_SUFFIXES and f.name in TOKENIZER_TEXT):
            continue
        h.update(f"{f.name}\0".encode())
        with open(f, "rb") as fh:
            h.update(hashlib.file_digest(fh, "sha256").digest())
    return h.hexdigest()[:16]


@dataclass
class LocalModels:
    """The same interface as `bench.world.prepare.Prepared`, over user-supplied model folders."""

    student: Path
    teachers: dict[str, Path] = field(default_factory=dict)
    device: str = "cpu"
    info: dict = field(default_factory=dict)

    def load_student(self) -> tuple[Any, Any]:
        return load_model(self.student, device=self.device, dtype=_dtype(self.device))

    def load_teacher(self, name: str, ledger: Ledger, *, on_build: Any = None) -> Policy:
        """A teacher folder given to the run (nothing is built here, so `on_build` is never called)."""
        if name not in self.teachers:
            known = ", ".join(sorted(self.teachers)) or "none (pass --external PATH or --teacher DOMAIN=PATH)"
            raise ConfigError(f"no teacher {name!r} for this run; teachers: {known}")
        model, tokenizer = load_model(self.teachers[name], device=self.device, dtype=_dtype(self.device))
        return Policy(name, model, tokenizer, ledger=ledger, trainable=False, chat=True)

    def ledger_rows(self) -> list[dict]:
        return []  # trained elsewhere: their cost is not known here, so nothing is booked

    def model_hashes(self) -> dict[str, str]:
        if "model_hashes" not in self.info:
            hashes = {"base": folder_digest(self.student)}
            hashes.update({name: folder_digest(path) for name, path in self.teachers.items()})
            self.info["model_hashes"] = hashes
        return self.info["model_hashes"]


def local_models(model: str, external: str | None, teachers: tuple[tuple[str, str], ...], device: str) -> LocalModels:
    """Resolve the folders now, so a wrong path fails before any work starts."""
    named = {name: resolve_model(path) for name, path in teachers}
    if external:
        named["external"] = resolve_model(external)
    return LocalModels(student=resolve_model(model), teachers=named, device=device)
