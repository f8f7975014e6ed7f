"""`bench prepare`: the shared base student and the external teacher of a profile, built once and cached.

The tiny worlds (docs/design.md, Tasks and worlds; docs/world.md):
- base student: the tiny student architecture after a supervised warm-up on short answers of all four
  domains, on imperfect data: a share `mistake_rate` of the answers carry one systematic, plausible
  mistake (the last character shifted: 355 -> 356, abcd -> abce, a flipped last truth-table bit) and a
  share `label_noise` one random wrong character. Learning the rule well but being unsure between the
  right answer and the habitual mistake leaves greedy decoding often wrong while sampling finds the
  right answer (pass@8 well above pass@1): room for RL to sharpen. Its FLOPs are booked `shared`.
- external teacher: a >= 4x larger model trained longer on verbose worked solutions, so that, like a
  real post-trained teacher, it is stronger and writes longer answers. Its FLOPs are booked `external`.

Both are trained by the warm-up recipe of `bench.world.warmup`, deterministic (seeded), and cached
under `$OPD_BENCH_CACHE/prepared/`; the cache key covers the specs, the warm-up settings and the
suite's content hash. `bench prepare` builds both; `bench run` builds the base and leaves the teacher
(most of the preparation time) to the first method that asks for it, which books the teacher's
training `external` in that run's ledger. `prepared.json` holds calibration figures per domain
(`calibrate`): base greedy pass@1, base pass@8 at temperature 1 and lengths; `external.json` the
teacher's greedy pass@1 and lengths, so that a user sees how much room the tiny world leaves and how
much stronger the teacher is.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bench import store
from bench.errors import ConfigError, RunError
from bench.accounting.ledger import Ledger, ledger_context
from bench.evaluation import Evaluator
from bench.policy import Policy
from bench.registry import get_suite
from bench.rollout.torch_engine import TorchRollout
from bench.world import reference
from bench.world.hf import folder_digest
from bench.world.models import TINY_SPECS, cache_root, load_model, save_model, state_digest
from bench.world.profiles import PROFILES, Profile, WarmupConfig
from bench.world.warmup import WARMUP_SUITE, matmul_precision, warm_up

PREPARE_LOG = "prepare.log"  # a world's cache folder: its warm-ups' progress, stamped lines


@dataclass
class Prepared:
    """The cached base student, and the external teacher once something asked for it."""

    folder: Path
    info: dict
    profile: Profile | None = None
    rebuilt: bool = False  # built from scratch here, never from the shipped reference
    # Named teachers from local folders (`bench run --teacher NAME=PATH`, e.g. an expert a calibration
    # run saved): trained elsewhere, so nothing is booked for their training.
    extra_teachers: dict[str, Path] = dataclasses.field(default_factory=dict)
    verified: dict[str, str] = dataclasses.field(default_factory=dict)  # name -> weights hash, recomputed
    hashed: bool = False  # `model_hashes` has verified every built model of this world once

    @property
    def device(self) -> str:
        """Where this world's models run: its profile's device (`gpu-small`: cuda)."""
        return self.profile.device if self.profile else "cpu"

    def load_student(self) -> tuple[Any, Any]:
        """The base student, its weights checked against the hash recorded when it was built."""
        return self._load_verified("student", "base", self.info["model_hashes"]["base"], "prepared.json")

    def _load_verified(self, sub: str, name: str, expected: str, info_file: str) -> tuple[Any, Any]:
        """Load a cached model and recompute its weights hash: a damaged cache entry is refused, and
        the hash a record carries is this one, never a copy of what the cache says. Its config and
        tokenizer files are checked against their hash in `info_file` (`files_hash`, recorded at
        the model's first load)."""
        try:
            self._check_files(sub, name, info_file)
            model, tokenizer = load_model(self.folder / sub, device=self.device)
        except FileNotFoundError as exc:  # read without the entry's lock: a builder may be replacing it
            raise RunError(f"the cached {name} model in {self.folder / sub} is missing a file ({exc.filename}): "
                           "another process may be replacing it (`bench prepare --from-checkpoint`); run again "
                           f"when it is done, or delete {self.folder} and run `bench prepare` again") from exc
        digest = state_digest(model)
        if digest != expected:
            raise RunError(f"the cached {name} model in {self.folder / sub} is damaged (weights hash {digest}, "
                           f"recorded {expected}); delete {self.folder} and run `bench prepare` again")
        self.verified[name] = digest
        return model, tokenizer

    def _check_files(self, sub: str, name: str, info_file: str) -> None:
        """Refuse a cached model whose config or tokenizer files changed since its first load (edited
        in place, or damaged yet still loadable: the weights hash would not see it)."""
        digest, path = folder_digest(self.folder / sub, (".json",)), self.folder / info_file
        info = store.read_json(path)  # written whole (`store.write_json`): read without waiting on a builder
        if "files_hash" not in info:  # built or installed, never loaded yet: its files as they are now, once
            with store.building(self.folder):
                if "files_hash" not in (info := store.read_json(path)):
                    store.write_json(path, info := {**info, "files_hash": digest})
        if info["files_hash"] != digest:
            raise RunError(f"the cached {name} model in {self.folder / sub} is damaged (its config and "
                           f"tokenizer files hash {digest}, recorded {info['files_hash']}); delete "
                           f"{self.folder} and run `bench prepare` again")

    def verify(self) -> None:
        """Load and hash every model this world has built (`bench prepare` reports only what passes)."""
        self.load_student()
        teacher = self.teacher_info()
        if teacher is not None:
            self._load_verified("external", "external", teacher["model_hash"], "external.json")

    def teacher_info(self) -> dict | None:
        path = self.folder / "external.json"
        return store.read_json(path) if path.exists() else None

    def ensure_teacher(self, *, progress: bool = False, on_build: Any = None) -> dict:
        """Install the shipped external teacher, or build it, if it is not cached yet; returns its info.
        `on_build()` is called before a build (hours for a real world's teacher)."""
        if self.teacher_info() is None:
            if self.profile is None:
                raise RuntimeError(f"{self.folder}: the external teacher is not built and no profile was given")
            with store.building(self.folder):
                if self.teacher_info() is None and (self.rebuilt or not reference.install(
                        self.profile.name, self.info["key"], self.folder, "external",
                        part_keys(self.profile, self.info["suite_hash"])["external"])):
                    if on_build is not None:
                        on_build()
                    _build_teacher(self.folder, self.profile, progress=progress)
        return self.teacher_info()

    def load_teacher(self, name: str, ledger: Ledger, *, on_build: Any = None) -> Policy:
        """The external teacher, built on first use (`on_build`: `ensure_teacher`'s). Its training is booked
        `external` in `ledger` once (a resumed run whose ledger already holds it is not charged again):
        recorded, never counted."""
        if name in self.extra_teachers:
            model, tokenizer = load_model(self.extra_teachers[name], device=self.device)
            return Policy(name, model, tokenizer, ledger=ledger, trainable=False)
        if name != "external":
            known = ", ".join(["external", *sorted(self.extra_teachers)])
            raise ConfigError(f"no prepared teacher {name!r}; teachers: {known} (add one with --teacher NAME=PATH)")
        info = self.ensure_teacher(on_build=on_build)
        model, tokenizer = self._load_verified("external", "external", info["model_hash"], "external.json")
        if not ledger.total("external"):
            for row in info["ledger"]:
                ledger.charge(**row)
        return Policy("external", model, tokenizer, ledger=ledger, trainable=False)

    def ledger_rows(self) -> list[dict]:
        """The base student's warm-up (`shared`); the teacher's rows are booked when it is loaded."""
        return self.info["ledger"]

    def model_hashes(self) -> dict[str, str]:
        """Weights hashes of the built models, recomputed from the files (`verify`), never copied: once
        for this `Prepared` (a run's, or a resumed run's own), and for a model loaded since (a run's
        teacher) the hash it was loaded with, so a finished run records the models it ran without
        loading them again (which would wait on, or fail at, a cache entry another process is
        building or replacing). Each `prepare()` makes a new one, which verifies again."""
        if not self.hashed:
            self.verify()
            self.hashed = True
        extra = {name: folder_digest(path) for name, path in self.extra_teachers.items()}
        return {**self.verified, **extra}

    def calibration(self) -> list[dict]:
        """`calibrate`'s rows, with the teacher's figures where the teacher is built."""
        teacher = {r["domain"]: r for r in (self.teacher_info() or {}).get("calibration", [])}
        return [{**r, **teacher.get(r["domain"], {})} for r in self.info["calibration"]]


def _recipe(config: WarmupConfig) -> dict:
    """The warm-up recipe as the cache key sees it: a teacher mix left uniform is left out, so the
    keys of worlds built before the teacher had a mix of its own stay as they were."""
    recipe = dataclasses.asdict(config)
    if not recipe["teacher_domain_weights"]:
        del recipe["teacher_domain_weights"]
    return recipe


def world_key(profile: Profile, config: WarmupConfig, suite_hash: str) -> str:
    """The cache entry of a world's recipe: both parts' models and settings, the tasks."""
    payload = {
        "profile": profile.name,
        "world_version": profile.world_version,
        "student": dataclasses.asdict(TINY_SPECS[profile.student]),
        "teacher": dataclasses.asdict(TINY_SPECS[profile.teacher]),
        "warmup": _recipe(config),
        "suite": suite_hash,
        "version": 5,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]


# What each part's recipe does not read: a part's own key leaves out the other part's settings, so
# a shipped base still installs when only the teacher's recipe changes (and the other way round).
_TEACHER_ONLY = ("teacher_steps", "teacher_lr", "teacher_target", "teacher_domain_weights")
_STUDENT_ONLY = ("student_steps", "student_lr", "student_target", "domain_weights", "label_noise", "mistake_rate")


def part_keys(profile: Profile, suite_hash: str) -> dict[str, str]:
    """Each shipped part's recipe key ("student", "external"): its model, its settings, the tasks."""
    recipe = dataclasses.asdict(profile.warmup)
    keys = {}
    parts = (("student", profile.student, _TEACHER_ONLY), ("external", profile.teacher, _STUDENT_ONLY))
    for part, spec, other in parts:
        payload = {"profile": profile.name, "world_version": profile.world_version, "part": part,
                   "model": dataclasses.asdict(TINY_SPECS[spec]), "suite": suite_hash,
                   "warmup": {k: v for k, v in recipe.items() if k not in other}}
        keys[part] = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]
    return keys


def _ledger_rows(ledger: Ledger) -> list[dict]:
    return [{k: r[k] for k in ("category", "phase", "kind", "model", "flops", "tokens")} for r in ledger.rows()]


def prepare(profile: Profile, *, progress: bool = True, teacher: bool = True, rebuild: bool = False,
            checkpoints: dict[str, Path] | None = None) -> Prepared:
    """Find in the cache, install from the shipped reference, or build the profile's base student and,
    with `teacher`, its external teacher.

    `bench run` passes `teacher=False`: the teacher (the larger model, most of the preparation time)
    is then installed or built only when a method first asks for it (`Prepared.load_teacher`).
    `rebuild`: train both from scratch into a folder of their own, whatever is shipped or cached
    (`bench prepare --check` compares their hashes with the shipped ones).
    `checkpoints` ({"base" | "external": folder}): take that part from a checkpoint of a warm-up run
    along its recipe (benchmarks/warmup_curve.py, the recipe's last step) instead of training it
    again, replacing what the cache holds; its warm-up FLOPs come from the checkpoint's ledger rows.
    """
    if profile.device == "cuda" and not torch.cuda.is_available():
        raise RunError(f"the {profile.name} world trains and runs on a CUDA GPU and this machine has none; "
                       f"the CPU worlds are tiny (the default), direct and smoke")
    matmul_precision(profile)  # before its calibration too, where the base is found built
    config = profile.warmup
    checkpoints = checkpoints or {}
    suite = get_suite(WARMUP_SUITE, config.difficulty, profile.task_format)
    key = world_key(profile, config, suite.content_hash)
    folder = cache_root() / "prepared" / f"{profile.name}-{key}{'-rebuild' if rebuild else ''}"
    info_path = folder / "prepared.json"
    # a built base is read without waiting on the entry's lock (a teacher being built there holds it)
    with store.building(folder) if checkpoints or not info_path.exists() else contextlib.nullcontext():
        if "base" in checkpoints or (not info_path.exists() and (
                rebuild or not reference.install(profile.name, key, folder, "student",
                                                 part_keys(profile, suite.content_hash)["student"]))):
            _build_student(folder, profile, suite, key, progress=progress, checkpoint=checkpoints.get("base"))
        if "external" in checkpoints:
            _build_teacher(folder, profile, progress=progress, checkpoint=checkpoints["external"])
    prepared = Prepared(folder, store.read_json(info_path), profile, rebuilt=rebuild)
    if teacher:
        prepared.ensure_teacher(progress=progress)
    return prepared


def _warmed(profile: Profile, part: str, ledger: Ledger, *, progress: bool, checkpoint: Path | None,
            log: Path) -> Policy:
    """`part` trained by its recipe (its progress also in `log`), or loaded from `checkpoint`, a warm-up
    checkpoint at the recipe's last step (its bytes are the trained model's: docs/world.md), its
    warm-up rows booked in `ledger`."""
    if checkpoint is None:
        return warm_up(profile, part, ledger, progress=progress, log=log)
    steps = profile.warmup.student_steps if part == "base" else profile.warmup.teacher_steps
    checkpoint = Path(checkpoint)
    if checkpoint.name != f"step{steps}" or not (checkpoint / "ledger_rows.json").exists():
        raise RunError(f"{checkpoint} is not a warm-up checkpoint at step {steps}, the {profile.name} world's "
                       f"{'base' if part == 'base' else 'teacher'} recipe (benchmarks/warmup_curve.py writes "
                       f"OUT/step<N>/ with ledger_rows.json)")
    for row in json.loads((checkpoint / "ledger_rows.json").read_text()):
        ledger.charge(**row)
    model, tokenizer = load_model(checkpoint, device=profile.device)
    model.eval()
    return Policy(part, model, tokenizer, ledger=ledger)


def _build_student(folder: Path, profile: Profile, suite: Any, key: str, *, progress: bool,
                   checkpoint: Path | None = None) -> None:
    """Warm the base student up (or take it from `checkpoint`) and save it with `prepared.json` (its
    key, costs, hash, calibration)."""
    config = profile.warmup
    started = time.perf_counter()
    ledger = Ledger()
    student = _warmed(profile, "base", ledger, progress=progress, checkpoint=checkpoint, log=folder / PREPARE_LOG)
    save_model(student._model, student._tokenizer, folder / "student")
    store.write_json(folder / "prepared.json", {
        "profile": profile.name,
        "key": key,
        "world_version": profile.world_version,
        "warmup": dataclasses.asdict(config),
        "suite_hash": suite.content_hash,
        "ledger": _ledger_rows(ledger),
        "model_hashes": {"base": state_digest(student._model)},
        "calibration": calibrate(student, suite, profile),
        "wall_s": round(time.perf_counter() - started, 1),  # training and calibration, this machine
        **_checkpoint_note(checkpoint),
    })


def _build_teacher(folder: Path, profile: Profile, *, progress: bool, checkpoint: Path | None = None) -> dict:
    """Train the external teacher on worked solutions (or take it from `checkpoint`); save it and
    `external.json` (atomically)."""
    config = profile.warmup
    suite = get_suite(WARMUP_SUITE, config.difficulty, profile.task_format)
    started = time.perf_counter()
    ledger = Ledger()
    teacher = _warmed(profile, "external", ledger, progress=progress, checkpoint=checkpoint, log=folder / PREPARE_LOG)
    tmp = folder / f"external.tmp{os.getpid()}"
    save_model(teacher._model, teacher._tokenizer, tmp)
    shutil.rmtree(folder / "external", ignore_errors=True)  # a concurrent build of the same teacher
    os.replace(tmp, folder / "external")
    info = {
        "ledger": _ledger_rows(ledger),
        "model_hash": state_digest(teacher._model),
        "calibration": teacher_calibration(teacher, suite, profile),
        "wall_s": round(time.perf_counter() - started, 1),
        **_checkpoint_note(checkpoint),
    }
    store.write_json(folder / "external.json", info)
    return info


def _checkpoint_note(checkpoint: Path | None) -> dict:
    """Where a part taken from a warm-up checkpoint came from: its `wall_s` is then loading and
    calibrating only, not the warm-up's hours."""
    return {} if checkpoint is None else {"from_checkpoint": Path(checkpoint).name}


def calibrate(student: Policy, suite: Any, profile: Profile, *, greedy_size: int = 500,
              sample_size: int = 200) -> list[dict]:
    """Per domain: the base's greedy pass@1, pass@8 at temperature 1 and mean length.

    Evaluation-only (booked `eval`); greedy on the first `greedy_size` held-out prompts, sampling on the
    first `sample_size` (both at most the profile's eval_size, so a test profile stays fast).
    """
    greedy_size, sample_size = min(greedy_size, profile.eval_size), min(sample_size, profile.eval_size)
    base = Evaluator(suite, greedy_size, profile.eval_max_new_tokens).evaluate(student)
    generator, k = torch.Generator().manual_seed(0), 8  # pass@8: the figures' `base_pass8`
    rows = []
    for domain in suite.domains:
        problems = suite.heldout(domain)[:sample_size]
        with ledger_context(category="eval", phase="eval"):
            batch = TorchRollout().generate(
                student._model, [student.encode(p.prompt) for p in problems], n=k,
                max_new_tokens=profile.max_new_tokens, temperature=1.0, eos_id=student.stop_ids,
                generator=generator,
            )
        texts = [student.decode(ids) for ids in batch.completion_ids]
        hits = torch.tensor([suite.score(p, t) for p, t in zip((p for p in problems for _ in range(k)), texts)])
        hits = hits.view(len(problems), k)  # [prompts, k]
        rows.append({
            "domain": domain,
            "base_pass1": base["domain_accuracy"][domain],
            "base_pass8": float(hits.max(1).values.mean()),
            "base_sample_acc": float(hits.mean()),
            "base_length": base["domain_mean_length"][domain],
        })
    return rows


def teacher_calibration(teacher: Policy, suite: Any, profile: Profile, *, greedy_size: int = 500) -> list[dict]:
    """Per domain: the external teacher's greedy pass@1 and mean length (is it stronger, and longer?)."""
    result = Evaluator(suite, min(greedy_size, profile.eval_size), profile.eval_max_new_tokens).evaluate(teacher)
    return [{"domain": d, "teacher_pass1": result["domain_accuracy"][d],
             "teacher_length": result["domain_mean_length"][d]} for d in suite.domains]


def format_calibration(rows: list[dict]) -> list[str]:
    """The calibration figures as aligned text lines (what `bench prepare` prints); `—` where the
    teacher is not built yet."""
    head = f"{'domain':<8} {'base@1':>7} {'base@8':>7} {'sample':>7} {'len':>5} {'teacher@1':>9} {'t.len':>6}"
    lines = [head]
    for r in rows:
        teacher = (f"{100 * r['teacher_pass1']:8.1f}% {r['teacher_length']:6.1f}" if "teacher_pass1" in r
                   else f"{'—':>9} {'—':>6}")
        lines.append(f"{r['domain']:<8} {100 * r['base_pass1']:6.1f}% {100 * r['base_pass8']:6.1f}% "
                     f"{100 * r['base_sample_acc']:6.1f}% {r['base_length']:5.1f} {teacher}")
    return lines


def record_smoke_digest() -> Path:
    """Build the smoke base from scratch and record its weights hash for this CPU (`smoke-digest.json`,
    one hash per CPU signature; a new world version drops the other CPUs' hashes, which it outdates)."""
    with tempfile.TemporaryDirectory() as cache:
        os.environ["OPD_BENCH_CACHE"] = cache
        base = prepare(PROFILES["smoke"], progress=False, teacher=False, rebuild=True).model_hashes()["base"]
    path = reference.ROOT / "smoke-digest.json"
    version = PROFILES["smoke"].world_version
    old = json.loads(path.read_text()) if path.exists() else {}
    digests = old.get("base", {}) if old.get("world_version") == version else {}
    meta = {"world_version": version, "base": {**digests, reference.cpu_signature(): base}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    return path


if __name__ == "__main__":
    import sys

    if sys.argv[1:] != ["--smoke-digest"]:
        sys.exit("usage: python -m bench.world.prepare --smoke-digest")
    print(record_smoke_digest())
