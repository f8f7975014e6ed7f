"""benchmarks/gpu_check.py --dry-run: every part of the prepared GPU check runs on the CPU (with a
2-layer model and a few steps), so that device minutes go to measuring, not debugging; and its time
budget skips and lists what does not fit, keeping what was measured."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.bench.support import benchmark_module

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"


def _dry_run(out: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--out", str(out), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_the_gpu_check_runs_every_part_on_the_cpu(tmp_path):
    out = tmp_path / "dry.json"
    proc = _dry_run(out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    parts = ("audit", "fused", "rollout", "update", "gpu_small", "rollout_more", "gpu_small_more", "profile")
    assert {p: result[p].get("error") for p in parts} == dict.fromkeys(parts)
    assert result["skipped"] == [] and result["rerun"] is None
    (batch, short), (batch_more, short_more) = result["rollout"]["shapes"], result["rollout_more"]["shapes"]
    assert [batch["shape"], short["shape"]] == ["4x2x8", "4x2x4"]  # the batch first
    assert {"ours", "hf_dynamic", "hf_static"} <= set(batch) and "hf_static" not in short
    assert all(row[e]["tokens"] > 0 for row in (batch, short) for e in ("ours", "hf_dynamic"))
    assert short["ours_again"]["tokens"] > 0 and "ours_again" not in batch  # after compiled `generate`
    assert batch["ours_vs_hf_static"] > 0 and short["ours_vs_hf_dynamic"] > 0 and short["ours_vs_hf_static"] is None
    assert result["rollout"]["goal_1p5x_hf_static_on_the_batch"] in (True, False)
    assert result["rollout"]["never_below_hf_dynamic"] in (True, False)
    assert "hf_static" not in batch_more and short_more["hf_static"]["tokens"] > 0
    assert batch_more["ours"]["tokens"] > 0 and short_more["ours"]["tokens"] > 0  # measured again, beside them
    assert short_more["ours_vs_hf_static"] > 0
    assert all(r["torch_eager"]["tokens"] > 0 and r["ours_vs_torch_eager"] > 0 for r in (batch_more, short_more))
    # at each shape the goal's paths, then the pieces apart at each shape
    shapes = result["update"]["shapes"]
    assert [(r["seq"], r["path"]) for r in shapes] == [
        (32, "eager"), (32, "fused_and_compiled"), (64, "eager"), (64, "fused_and_compiled"),
        (32, "compiled"), (32, "fused"), (64, "compiled"), (64, "fused")]
    assert [r["compiled_while_timed"] for r in shapes] == [0] * 8  # compiled before the clock
    # through the update engine, as `bench run` trains: an unfused head's step at the second shape in two
    # micro-batches (the logit budget scaled down), a fused head's in one
    assert [r["micro_batches"] for r in shapes] == [1, 1, 2, 1, 1, 1, 2, 1]
    # each path compiles from cleared caches in its first step: the decoder's one graph for every layer, and the
    # fused head's forward and backward where it runs compiled; but a micro-batch of one row runs eagerly, as in
    # `bench run`, so the compiled decoder with an unfused head compiles nothing at the second shape
    assert [r["graphs_compiled"] for r in shapes] == [0, 3, 0, 3, 1, 0, 0, 0]
    # the fused head keeps the first shape's logits and recomputes the second's (the budget scaled down), and
    # only a recomputation is charged beyond the model's FLOPs
    assert [r["head_logits_kept"] for r in shapes] == [False, True, False, False, False, True, False, False]
    assert [r["charged_flops"] > r["model_flops"] for r in shapes] == [False, False, False, True] * 2
    assert len({(r["seq"], r["model_flops"]) for r in shapes}) == 2  # recomputation taken off: one model
    assert [r["compiled_head"] for r in shapes] == [False, True, False, True, False, False, False, False]
    assert [r["fused_optimizer"] for r in shapes] == [True] * 8  # CUDA's default, in the dry run
    assert all(r["cost_s"] > 0 for r in shapes)
    assert [r["master_weights"] for r in shapes] == [True] * 8  # the model is bf16
    timed = [r[e] for part in ("rollout", "rollout_more") for r in result[part]["shapes"] for e in r if e in
             ("ours", "hf_dynamic", "hf_static", "torch_eager")]
    assert len(timed) == 10 and all(t["compiled_while_timed"] == 0 for t in timed)
    profiled = result["profile"]
    assert profiled["rollout"]["wall_s"] > 0
    assert [profiled[k]["fused_and_compiled"] for k in ("update_eager", "update")] == [False, True]
    assert {profiled[k]["compiled_while_profiled"] for k in ("rollout", "update_eager", "update")} == {0}
    assert all({op["op"] for op in profiled[k]["by_host"]} & {"aten::mm", "aten::addmm", "aten::bmm"}
               for k in ("update_eager", "update"))
    assert profiled["update"]["by_device"] == []  # no kernels on the CPU: no device time to rank
    for key in ("update_eager", "update"):  # which attention ran, eager and compiled (here sdpa's CPU kernel)
        assert any(op["op"].startswith("aten::_scaled_dot_product") for op in profiled[key]["attention"])
    # bf16, as on the GPU: the fused head's probabilities come from its own log-sum-exp, so now and then
    # one of its logit gradients rounds to another bf16 value than eager's (1 batch in 8 here, 5e-5 of
    # the gradient's norm), with one slice as with 8; both are held to bf16's tolerance
    for fused in (result["fused"], result["fused"]["recomputed"]):  # the logits kept, then recomputed
        assert fused["max_abs_logprob_diff"] < 1e-5 and fused["grad_rel_diff"] < 1.6e-2
    timing = result["fused"]["timing"]
    assert timing["rows"] == 50 and timing["eager_s"] > 0
    assert all(timing[f"{name}_over_eager"] > 0 for name in ("kept", "recomputed", "kept_compiled",
                                                            "recomputed_compiled"))
    sliced = result["fused"]["sliced"]
    assert sliced["slices"] == 8 and sliced["max_abs_logprob_diff"] < 1e-5 and sliced["grad_rel_diff"] < 1.6e-2
    compiled = result["fused"]["sliced_compiled"]
    assert compiled["slices"] == 8 and compiled["max_abs_logprob_diff"] < 1e-5 and compiled["grad_rel_diff"] < 1.6e-2
    # a cosine, computed in float64: never above 1 by more than its rounding (summed in fp32 it was 1.000005)
    assert all(0.99 < got["grad_cosine"] <= 1 + 1e-12 for got in (result["fused"], result["fused"]["recomputed"],
                                                                  sliced, compiled))
    audit = result["audit"]
    assert audit["within_2pct"] and audit["graph_rollout"]["eager_rel_diff"] == 0
    assert audit["graph_rollout"]["same_charge"] and audit["graph_rollout"]["same_tokens"]
    small, more = result["gpu_small"], result["gpu_small_more"]
    assert small["prepare"]["seconds"] > 0 and small["run"]["counted_flops"] > 0
    # the base's calibration, which `bench prepare` computes anyway, and the base-choosing rule on it
    assert set(small["prepare"]["calibration"]) == {"math", "code", "graphs", "strings"}
    assert small["prepare"]["base_rule"]["met"] in (True, False) and small["prepare"]["model_hash"]
    # what a run that falls short leaves for the world's calibration: its curve and its steps per phase
    assert small["run"]["curve"][0]["flops"] == 0 and small["run"]["curve"][-1]["flops"] > 0
    assert sum(p["steps"] for p in small["run"]["phases"].values()) > 0
    assert set(small["run"]["final_domain_accuracy"]) == {"math", "code"}
    assert set(small["goals"]) == {"base_rule", "prepare_3min", "run_3min", "gain_8_points"}
    assert None not in small["goals"].values()
    # the warm-up curve first: every 2 of the dry run's 4 steps, the rule never met by an untrained model, so the
    # base is the recipe's, and the prepare's 4 steps are the curve's first 4, weights and all
    assert [point["step"] for point in small["curve"]] == [2, 4]
    assert small["curve_end"] == "4 steps, the rule never met" and "chosen_step" not in small
    assert all(set(point["calibration"]["math"]) >= {"base_pass1", "base_sample_acc"} and "met" in point["base_rule"]
               for point in small["curve"])
    assert small["student_steps"] == 4  # the recipe's
    assert small["prepare"]["same_weights_as_the_curve"] is True
    assert more["teacher"]["model_hash"] and "base_prepare" not in more and "curve" not in more
    # the table the docs report, from the results file
    benchmark_module("gpu_check")  # puts its parts' package on the path
    from gpucheck import table

    text = table.table(json.loads(out.read_text()))
    assert text.startswith(f"{result['date']}, cpu (dry run), torch {result['torch']}")
    assert "| rollout 4x2x8 (prompts x samples x new tokens), tokens/s | ours " in text
    assert "not measured" not in text and "error" not in text
    assert ", 4 warm-up steps (the recipe's; the warm-up curve: 4 steps, the rule never met) (base, " in text
    assert "graph replays charged" in text and "prepare " in text and " points) |" in text
    assert "rollout 4x2x8: " in text and "update 2x32: " in text and "most host time: `aten::" in text
    assert "update_eager 2x32: " in text and "ours again, after compiled `generate`, " in text
    assert all(f"| update 2 x {seq} tokens, {how}, fused AdamW on fp32 master weights | " in text
               for how in ("eager", "compiled decoder", "fused head", "fused head + compiled decoder and head")
               for seq in (32, 64) if how == "eager" or "fused" not in how or seq == 64)
    assert all(f"| update 2 x 32 tokens, {how}, logits kept, fused AdamW on fp32 master weights | " in text
               for how in ("fused head", "fused head + compiled decoder and head"))
    assert "| fused head in 8 slices, compiled, against eager, bf16 | log-probs within " in text
    assert "| fused head, logits kept, against eager, bf16 | log-probs within " in text
    assert "| fused head, recomputed, against eager, bf16 | log-probs within " in text
    assert "| the head alone, 50 rows: log-probs and backward, time over eager (" in text


def test_a_spent_budget_skips_every_part_and_says_how_to_run_them(tmp_path):
    out = tmp_path / "dry.json"
    proc = _dry_run(out, "--budget-s", "0", "--parts", "rollout,audit")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["skipped"] == ["rollout", "audit"]  # in the order given
    assert result["rerun"] == "--parts rollout,audit" and "--parts rollout,audit" in proc.stdout
    assert result["audit"] == {"skipped": "no time left"} and "update" not in result


def test_a_measurement_that_does_not_fit_or_fails_is_listed_and_the_rest_kept(tmp_path):
    module = benchmark_module("gpu_check")
    check = module.Check(tmp_path / "r.json", deadline=time.time() + 60, dry=False)  # costs as on a GPU
    assert check.fits("ours", "rollout: ours at 1x1x1")  # 30 s of 60
    assert not check.fits("hf_static", "rollout: hf_static at 1x1x1")  # 120 s
    assert check.skipped == ["rollout: hf_static at 1x1x1"]
    check.costs["hf_static"] = 40.0  # measured in this process: it replaces the guess
    assert check.fits("hf_static", "rollout: hf_static at 1x1x2") and len(check.skipped) == 1
    check.results["part"] = {"a": check.measure("a", lambda: {"x": 1}), "b": check.measure("b", lambda: 1 / 0)}
    check.save()
    saved = json.loads((tmp_path / "r.json").read_text())
    assert saved["part"]["a"] == {"x": 1} and saved["part"]["b"]["error"].startswith("ZeroDivisionError")
    assert saved["skipped"] == ["rollout: hf_static at 1x1x1"]


def test_bad_options_are_one_line_and_exit_2(tmp_path):
    for args, said in ((["--budget-s", "-1"], "--budget-s must be >= 0"), (["--parts", "nope"], "unknown parts")):
        proc = _dry_run(tmp_path / "x.json", *args)
        assert proc.returncode == 2 and said in proc.stderr and not (tmp_path / "x.json").exists()


@pytest.mark.timeout(30)  # the hanging part sleeps 60 s unless the deadline stops it
def test_a_part_whose_process_dies_or_overruns_is_recorded_and_the_check_goes_on(tmp_path, monkeypatch):
    module = benchmark_module("gpu_check")
    check = module.Check(tmp_path / "r.json", deadline=time.time() + 3, dry=True)
    check.results["rollout"] = {"shapes": ["kept"]}
    check.save()
    dies, hangs = tmp_path / "dies", tmp_path / "hangs"
    dies.write_text("#!/bin/sh\nexit 3\n")
    hangs.write_text("#!/bin/sh\nexec sleep 60\n")
    for script in (dies, hangs):
        script.chmod(0o755)
    monkeypatch.setattr(module, "GRACE_S", 0)
    monkeypatch.setattr(sys, "executable", str(dies))  # the part's process: a crash
    check = module._run_part(check, "audit", tmp_path, dry=True)
    assert check.results["audit"]["error"] == "the part's process ended: 3"
    monkeypatch.setattr(sys, "executable", str(hangs))  # a part that runs past the budget
    check = module._run_part(check, "fused", tmp_path, dry=True)
    assert check.results["fused"]["error"] == "the part's process ended: stopped at the end of the budget"
    check = module._run_part(check, "update", tmp_path, dry=True)  # past the deadline now: not started
    assert check.results["update"] == {"skipped": "no time left"} and check.skipped == ["update"]
    assert json.loads((tmp_path / "r.json").read_text())["rollout"] == {"shapes": ["kept"]}


def test_results_of_two_calls_merge_into_one_table(tmp_path):
    module = benchmark_module("gpu_check")
    from gpucheck import table

    first = {"date": "d1", "device": "gpu", "audit": {"error": "RuntimeError: boom"},
             "update": {"shapes": [{"batch": 16, "seq": 1024, "fused_and_compiled": False, "mfu": 0.3,
                                    "flop_per_s": 3e14, "first_step_s": 1.0}]},
             "gpu_small": {"skipped": "no time left"}, "rerun": "--parts gpu_small"}
    second = {"date": "d2", "device": "gpu", "update": {"skipped": "no time left"},
              "gpu_small": {"prepare": {"seconds": 100.0}, "run": {"error": "OutOfMemoryError: x"}}, "rerun": None}
    files = []
    for i, results in enumerate((first, second)):
        files.append(tmp_path / f"{i}.json")
        files[-1].write_text(json.dumps(results))
    merged = table.merge(files, module.PARTS)
    assert merged["update"] == first["update"] and merged["gpu_small"] == second["gpu_small"]  # skipped: kept
    assert merged["date"] == "d2" and merged["rerun"] is None
    text = table.table(merged)
    # an older file's rows (no path): eager, or fused and compiled
    assert "| update 16 x 1024 tokens, eager | 30.0% MFU (300 TFLOP/s, first step 1.0 s) | 40% |" in text
    compiled = {"batch": 16, "seq": 1024, "path": "compiled", "mfu": 0.3, "flop_per_s": 3e14, "first_step_s": 20.0,
                "graphs_compiled": 1}
    assert "(300 TFLOP/s, first step 20.0 s, 1 graph compiled) |" in table.table({"update": {"shapes": [compiled]}})
    # the update engine's micro-batches, where it cut the step into more than one
    cut = {**compiled, "path": "eager", "graphs_compiled": 0, "micro_batches": 16}
    assert "(300 TFLOP/s, first step 20.0 s, 16 micro-batches) |" in table.table({"update": {"shapes": [cut]}})
    assert "RuntimeError: boom" in text and "prepare 100 s; run: OutOfMemoryError: x" in text
    prep = {"seconds": 50.0, "calibration": {"math": {"base_pass1": 0.25, "base_sample_acc": 0.05}},
            "base_rule": {"spread": False, "room": False, "met": False}}
    assert table._base_text(prep) == (" (base, greedy / sampled: math 25.0% / 5.0%; base-choosing rule not met: a "
                                       "domain sampled under 10% or over 90% and no domain's greedy >= 30% with "
                                       "another's <= 20%)")
    assert "| rollout tokens/s | not measured | |" in text
    # the table's update rows by shape, then eager, each piece and both, whatever order they were measured in
    row = {"batch": 16, "mfu": 0.3, "flop_per_s": 3e14, "first_step_s": 1.0}
    measured = [{**row, "seq": seq, "path": path} for seq, path in (
        (1024, "eager"), (1024, "fused_and_compiled"), (2048, "eager"), (2048, "fused_and_compiled"),
        (1024, "compiled"), (1024, "fused"), (2048, "compiled"), (2048, "fused"))]
    text = table.table({"update": {"shapes": measured}})
    lines = [line for line in text.splitlines() if line.startswith("| update")]
    assert [line.split(" | ")[0] for line in lines] == [
        f"| update 16 x {seq} tokens, {how}" for seq in (1024, 2048)
        for how in ("eager", "compiled decoder", "fused head", "fused head + compiled decoder")]
    # a third call whose part ran but had time for none of its measurements keeps the second's
    third = tmp_path / "2.json"
    third.write_text(json.dumps({"date": "d3", "gpu_small": {"profile": "gpu-small", "part_s": 0.0,
                                                             "goals": {"prepare_3min": None}}}))
    assert table.merge([*files, third], module.PARTS)["gpu_small"] == second["gpu_small"]
    proc = subprocess.run([sys.executable, str(SCRIPT), "--table", str(files[0]), str(tmp_path / "none.json")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "no results file" in proc.stderr


# The GPU check's results that docs/gpu.md shows, in the order its table merges them.
MEASURED = [ROOT / "benchmarks" / "gpu_results" / f"2026-12-04-{call}.json"
            for call in ("first", "second", "third", "fourth")]


def test_the_docs_table_is_the_scripts_table_of_the_results_files():
    """docs/gpu.md says its table is what `gpu_check.py --table` prints on the results files: it is,
    line for line, so a results file or a table change is seen in the docs, not found by accident."""
    proc = subprocess.run([sys.executable, str(SCRIPT), "--table", *map(str, MEASURED)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    printed = proc.stdout.strip()
    assert printed.splitlines()[0].startswith("2026-12-04, NVIDIA H200")
    assert printed in (ROOT / "docs" / "gpu.md").read_text(encoding="utf-8")


def test_the_readme_table_is_the_scripts_brief_table_of_the_results_files():
    """The README's GPU table is `gpu_check.py --brief --table` on the same files: each goal's figures,
    met or not, as the script reads them."""
    proc = subprocess.run([sys.executable, str(SCRIPT), "--brief", "--table", *map(str, MEASURED)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    printed = proc.stdout.strip()
    assert "**2.27x** `generate` (static cache, compiled)" in printed and "40%: **not met**" in printed
    assert printed in (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_brief_table_says_which_goals_are_met():
    benchmark_module("gpu_check")
    from gpucheck import table

    update = [{"batch": 16, "seq": seq, "path": path, "mfu": mfu, "first_step_s": 30.0}
              for seq, path, mfu in ((1024, "eager", 0.3), (2048, "eager", 0.32),
                                     (1024, "fused_and_compiled", 0.41), (2048, "fused_and_compiled", 0.45))]
    small = {"prepare": {"seconds": 61.0}, "run": {"wall_s": 150.0, "base_accuracy": 0.2, "final_accuracy": 0.31,
                                                   "gain_points": 11.0},
             "goals": {"prepare_3min": True, "run_3min": True, "gain_8_points": True}}
    audit = {"rows": [{"phase": "forward", "rel_diff": 0.0}, {"phase": "generate", "rel_diff": 0.002}]}
    text = table.brief({"update": {"shapes": update}, "gpu_small": small, "audit": audit})
    assert "| update step, 16 x 1024 / 16 x 2048 tokens, eager | 30.0% / 32.0% MFU | 40%: **not met** |" in text
    assert ("| the same, fused LM head + compiled decoder | 41.0% / 45.0% MFU (first step 30 s / 30 s compiling) "
            "| 40%: met |") in text
    assert "| 61 s / 150 s, 20.0% -> 31.0% (+11.0 points) | 3 min each, +8 points: met |" in text
    assert "| FLOP ledger against torch's counter on CUDA | off by +0.200% | exact: **not met** |" in text
    assert "| rollout tokens/s, our engine against `generate` | not measured |" in text
    small["goals"]["gain_8_points"] = False
    assert "+8 points: **not met** |" in table.brief({"gpu_small": small})
    # ours below dynamic-cache `generate` at the batch alone: the goal of every shape is not met
    rollout = [{"shape": shape, "ours": {"tokens_per_s": 1000.0}, "ours_vs_hf_dynamic": ratio}
               for shape, ratio in (("64x8x256", 0.9), ("64x8x16", 1.5), ("16x8x1024", 2.0))]
    text = table.brief({"rollout": {"shapes": rollout}})
    assert "| rollout 64 prompts x 8 samples x 256 tokens, our CUDA-graph engine | 1,000 tokens/s: 0.9x `generate` " \
           "(dynamic cache) | 1.5x static: not measured |" in text
    assert "1.5x and 2x `generate` (dynamic cache) | never below dynamic: **not met** |" in text


def test_the_table_names_kernels_by_what_they_compute():
    benchmark_module("gpu_check")  # puts its parts' package on the path
    from gpucheck import table

    mul = ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor"
           "<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> > >"
           "(at::TensorIteratorBase&, ...)::{lambda(int)#1}>(int, ...)")
    softmax = "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float>(float*, int)"
    assert table._kernel_name(mul) == "elementwise_kernel[MulFunctor]"
    assert table._kernel_name(softmax) == "cunn_SoftMaxForward"
    assert table._kernel_name("nvjet_sm90_tst_64x8_64x16_1x1_h_bz_NNT") == "nvjet_sm90_tst_64x8_64x16_1x1_h_bz_NNT"
    run = {"shape": "1x1", "wall_s": 2.0, "device_busy_share": 0.5, "busy_from": "kernels",
           "by_device": [{"op": mul, "calls": 3, "device_ms": 40.0}, {"op": softmax, "calls": 1, "device_ms": 9.0}]}
    assert table._profile_text("rollout", run) == (
        "rollout 1x1: device busy 50% of 2.00 s; most device time: `elementwise_kernel[MulFunctor]` 40.0 ms, "
        "`cunn_SoftMaxForward` 9.0 ms")
    run["attention"] = [{"op": "aten::_scaled_dot_product_flash_attention", "calls": 24, "self_host_ms": 1.0},
                        {"op": "aten::_log_softmax", "calls": 1, "self_host_ms": 1.0},  # the LM head's: not named
                        {"op": "void pytorch_flash::flash_fwd_kernel<...>(...)", "calls": 24, "device_ms": 5.0}]
    assert table._profile_text("rollout", run).endswith("; attention: `aten::_scaled_dot_product_flash_attention`")
    del run["busy_from"]  # an older file summed ops and their kernels: its share is not shown
    text = table._profile_text("rollout", run)
    assert "counted twice" in text and "50%" not in text


def test_the_warmup_curve_chooses_the_base_that_gpu_small_prepares_and_runs(tmp_path, monkeypatch):
    """The curve ends at the first checkpoint that meets the base-choosing rule (later ones cannot change
    the base it chooses, so they cost no device time), each point in the results file as soon as it is
    measured; `bench prepare` then builds the base at that many steps, the same weights as the curve's
    checkpoint, and the default run starts from it."""
    from bench.world import profiles, warmup

    benchmark_module("gpu_check")  # puts its parts' package on the path
    from gpucheck import common, small

    monkeypatch.setenv("OPD_BENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(common, "SIZES", common.DRY_SIZES)  # what `dry_run()` sets, undone after the test
    monkeypatch.setattr(common, "DEVICE", "cpu")
    # the dry profile registers itself in the profiles `bench run` reads (a module may hold the dict itself):
    # the entry goes at the test's end
    monkeypatch.setitem(profiles.PROFILES, "gpu-small-dry", profiles.PROFILES["gpu-small"])
    figures = warmup.calibration_figures
    met = lambda rows: {**figures(rows), "base_rule": {"spread": True, "room": True, "met": True}}  # noqa: E731
    monkeypatch.setattr(warmup, "calibration_figures", met)  # read by the parts when they run
    check = common.Check(tmp_path / "check.json", deadline=None, dry=True)
    out = check.results["gpu_small"] = {}
    small.gpu_small(check, tmp_path, out)
    assert out["curve_end"] == "the base-choosing rule met at step 2" and [p["step"] for p in out["curve"]] == [2]
    saved = json.loads((tmp_path / "check.json").read_text())["gpu_small"]
    assert [p["step"] for p in saved["curve"]] == [2]
    assert out["chosen_step"] == out["student_steps"] == 2
    assert out["prepare"]["same_weights_as_the_curve"] is True and out["prepare"]["model_hash"] == out["curve"][0][
        "model_hash"]
    assert out["run"]["counted_flops"] > 0 and out["goals"]["base_rule"] is True
    assert profiles.PROFILES["gpu-small-dry"].warmup.student_steps == 2  # what `bench run` found
    from gpucheck import table

    assert ", 2 warm-up steps (chosen by the warm-up curve) (base, greedy / sampled: math " in table.table(
        {"gpu_small": out})


def test_the_warm_up_curve_keeps_the_time_for_prepare_and_the_run(tmp_path, monkeypatch):
    """The gpu-small warm-up curve goes on to its next checkpoint only while the time left after it still
    holds `bench prepare` (at the curve's pace) and the default run, the goals the curve is for: with a
    run expected to take longer than the budget has, it stops at its first checkpoint and says why."""
    benchmark_module("gpu_check")  # puts benchmarks/ on the path, as the script runs
    from gpucheck import common, small

    from bench.world.profiles import PROFILES

    monkeypatch.setattr(common, "SIZES", common.DRY_SIZES)
    monkeypatch.setattr(common, "DEVICE", "cpu")
    monkeypatch.setitem(PROFILES, "gpu-small-dry", None)  # the dry profile is registered for this test only
    profile = small._small_profile(dry=True)
    check = common.Check(tmp_path / "r.json", deadline=time.time() + 600, dry=False)  # costs as on a GPU
    check.costs["run"] = 10_000.0
    out: dict = {}
    small._curve_small(check, profile, out)
    assert [p["step"] for p in out["curve"]] == [2]
    assert out["curve_end"] == "the rest of the budget kept for prepare and the run, at step 2"
    assert "chosen_step" not in out  # the recipe's steps then: the rule was not met
    # with time for both, it goes on to its last step
    check.costs["run"], out = 1.0, {}
    small._curve_small(check, profile, out)
    assert [p["step"] for p in out["curve"]] == [2, 4] and out["curve_end"] == "4 steps, the rule never met"
