"""What every part of the GPU check shares: the model's shape, the sizes, the device, timing, and
`Check` (the results file, written after every measurement, and the time budget).

`DEVICE` and `SIZES` are the GPU's until `dry_run()` switches this process to the CPU's dry run; the
parts read them here, at call time.
"""

from __future__ import annotations

import json
import time
import traceback
from pathlib import Path

import torch

TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
QWEN2_05B = dict(vocab_size=151936, hidden_size=896, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, intermediate_size=4864, max_position_embeddings=32768,
                 rope_theta=1e6, tie_word_embeddings=True)
# `--dry-run`: the same script on this CPU with a 2-layer model of the same family, in bf16 as on the
# GPU, to check it runs.
DRY = dict(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
           intermediate_size=128, max_position_embeddings=4096, tie_word_embeddings=True)
SIZES = {"audit": dict(batch=4, seq_len=512, gen_prompt=64, gen_tokens=64),
         "rollout": ((64, 8, 256), (64, 8, 16), (16, 8, 1024)), "update": ((16, 1024), (16, 2048)),
         "curve": dict(steps=2000, every=100), "profile": dict(new=64, update=(16, 1024))}
DRY_SIZES = {"audit": dict(batch=2, seq_len=32, gen_prompt=8, gen_tokens=8),
             "rollout": ((4, 2, 8), (4, 2, 4)), "update": ((2, 32), (2, 64)),
             "curve": dict(steps=4, every=2), "profile": dict(new=8, update=(2, 32))}
# a fixed budget for the dry run's fused head: it keeps the logits of its first update shape (2 x 25
# positions x 512) and recomputes its second's (2 x 49 x 512), so that the dry run takes both paths
# (on CUDA `Policy` keeps what free memory holds)
DRY_KEEP_LOGITS = 2**15
# and a budget of logits per micro-batch for the update engine (`bench.update.LOGIT_BUDGET`) that cuts
# an unfused head's step at the second update shape (2 x 64 x 512) in two and not at the first
# (2 x 32 x 512), as 2^29 cuts the GPU's 16 x 1024 and 16 x 2048 steps of a 152k vocabulary
DRY_LOGIT_BUDGET = 2**15
DEVICE = "cuda"


def dry_run() -> None:
    """This process's parts on the CPU at `DRY_SIZES` (`--dry-run`)."""
    global DEVICE, SIZES
    DEVICE, SIZES = "cpu", DRY_SIZES


def build_folder(dest: Path, shape: dict, seed: int = 0) -> Path:
    """A Qwen2-shaped model with random weights, saved in bf16 with our tokenizer."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    from bench.world.models import build_tokenizer

    tokenizer = build_tokenizer()
    tokenizer.chat_template = TEMPLATE
    config = Qwen2Config(**shape, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                         bos_token_id=tokenizer.bos_token_id)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa")
    model.save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    return dest


def load(folder: Path):
    from bench.world.models import load_model

    return load_model(folder, device=DEVICE, dtype=torch.bfloat16)  # the dry run too: the dtype the GPU runs


def sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def timed(fn, repeats: int = 1) -> float:
    sync()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    sync()
    return (time.perf_counter() - start) / repeats


def graphs_compiled() -> int:
    """Graphs dynamo has compiled in this process so far."""
    import torch._dynamo.utils

    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


def random_prompts(count: int, vocab: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(0)
    return [torch.randint(3, min(vocab, 259), (int(torch.randint(32, 64, (1,), generator=gen)),),
                          generator=gen).tolist() for _ in range(count)]


# -- the budget -----------------------------------------------------------------------------------
# What each measurement is expected to cost on an H200 at full size, in seconds, warm-up included: the
# compiled update from the last GPU check (its first step compiled for 51-100 s, the decoder compiled
# whole then; layer by layer, with symbolic sizes, not yet measured here), the rollouts from its
# tokens/s (about 131k tokens a call at 11-33k tokens/s) with a minute for compiling static-cache
# `generate`, gpu-small's prepare as measured (42 s) and the rest of gpu-small from its goals (3
# minutes each), the profile's as the measurements it repeats, and the head alone a guess (two compiled
# functions and 20 calls of about 0.1 s at most). A measurement that no longer fits
# in what is left of `--budget-s` is skipped.
COST_S = {"ours": 30, "ours_again": 10, "hf_dynamic": 45, "hf_static": 120, "torch_eager": 45, "update_eager": 20,
          "update_compiled": 100, "update_fused": 25, "update_fused_and_compiled": 100, "prepare": 60, "run": 180,
          "teacher": 150, "curve": 200, "fused_timing": 40,
          "profile_rollout": 30, "profile_update_eager": 20, "profile_update": 100}


class Check:
    """The results so far, the file they are written to after every measurement, and the budget."""

    def __init__(self, out: Path, deadline: float | None, dry: bool) -> None:
        """`deadline`: a `time.time()`, shared by the parts' processes, or None for no budget."""
        self.out, self.deadline, self.dry, self.results, self.skipped = out, deadline, dry, {}, []
        self.costs: dict[str, float] = {}  # measured in this process, in place of COST_S's guesses

    @classmethod
    def resume(cls, out: Path, deadline: float | None, dry: bool) -> Check:
        """The check as the earlier parts left it in `out`."""
        check = cls(out, deadline, dry)
        check.results = json.loads(out.read_text())
        check.skipped = check.results.get("skipped", [])
        return check

    def left(self) -> float:
        return float("inf") if self.deadline is None else self.deadline - time.time()

    def cost(self, what: str) -> float:
        """The seconds `what` (a COST_S key) is expected to take: as measured in this process, else
        COST_S's guess; 0 in a dry run."""
        return 0 if self.dry else self.costs.get(what, COST_S[what])

    def fits(self, what: str, label: str) -> bool:
        """Whether `what` (a COST_S key) fits in the time left; if not, `label` is listed as skipped."""
        cost = self.cost(what)
        if self.left() > 0 and self.left() >= cost:
            return True
        self.skipped.append(label)
        print(f"  skipped {label}: {self.left():.0f} s left, it needs about {cost} s", flush=True)
        return False

    def measure(self, label: str, fn, *args):
        """fn(*args), or {"error": ...} where it raises: one broken measurement hides no other."""
        try:
            return fn(*args)
        except Exception as exc:
            print(f"  {label} failed: {type(exc).__name__}: {exc}", flush=True)
            return {"error": f"{type(exc).__name__}: {first_line(str(exc))}",
                    "traceback": traceback.format_exc()[-3000:]}
        finally:
            self.save()

    def save(self) -> None:
        self.results["skipped"] = self.skipped
        tmp = self.out.with_name(self.out.name + ".tmp")
        tmp.write_text(json.dumps(self.results, indent=2, default=str))
        tmp.replace(self.out)


def first_line(text: str) -> str:
    """An error's first line: CUDA's errors add lines of advice."""
    return (text.strip().splitlines() or [""])[0]
