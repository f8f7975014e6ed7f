"""The README's headline numbers are the reference site's: every cell of its two results tables, each
claim's verdict per world, and each study's deciding estimates, read from leaderboard/results.json."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
RESULTS = json.loads((ROOT / "leaderboard" / "results.json").read_text(encoding="utf-8"))
TABLES = {"tiny": "**Worked-answer world**", "direct": "**Direct-answer world**"}
VERDICTS = {"holds": "holds", "does not hold": "does not hold at this scale", "inconclusive": "inconclusive",
            "not measured": "not measured"}


def _percent(x: float, accuracy: bool) -> str:
    """A share as a percentage with one decimal, as the site rounds it: an accuracy to three places
    (0.3685, a hair below in binary, is 0.368 there: 36.8%, though 100 × 0.3685 rounds to 36.9),
    any other share as a percentage."""
    return f"{100 * round(x, 3) if accuracy else 100 * x:.1f}"


def _pct(est: dict, accuracy: bool = False) -> str:
    low, value, high = (_percent(est[k], accuracy) for k in ("low", "value", "high"))
    return f"{value}% [{low}, {high}]"


def _acc(est: dict) -> str:
    return _pct(est, accuracy=True)


def _table(heading: str) -> list[list[str]]:
    """The rows of the first table after `heading`, each a list of its cells."""
    lines = README[README.index(heading):].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| suite |"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


@pytest.mark.parametrize("profile", TABLES)
def test_each_results_table_is_the_sites(profile):
    rows, suite = {}, None
    for cells in _table(TABLES[profile]):
        suite = cells[0] or suite
        rows[(suite.split(" (")[0], cells[1])] = (suite, cells[2:])
    boards = [b for b in RESULTS["boards"] if b["profile"] == profile]
    assert boards
    for b in boards:
        for m in b["methods"]:
            if m["is_protocol"]:
                continue
            label, cells = rows.pop((b["suite"], m["method"]))  # every method of the board is in the README
            metrics = m["metrics"]
            base = _percent(metrics["base_accuracy"]["value"], accuracy=True)
            assert label == b["suite"] or label == f"{b['suite']} (base {base}%)"
            assert cells == [_acc(metrics["final_accuracy"]), _acc(metrics["accuracy_at_25pct"]), _acc(metrics["auc"]),
                             f"{metrics['counted_flops']['value']:.1e}".replace("e+", "e"),
                             f"{metrics['mean_length']['value']:.1f}"], (b["suite"], m["method"])
    assert not rows  # and nothing else


def _claim_row(number: int) -> list[str]:
    line = next(line for line in README.splitlines() if line.startswith(f"| {number}. "))
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


@pytest.mark.parametrize("number", [1, 2, 3, 4])
def test_each_claims_verdict_per_world_is_the_findings_pages(number):
    claim = next(c for c in RESULTS["findings"] if c["number"] == number)
    cells = dict(zip(("claim", "tiny", "direct"), _claim_row(number)))
    for world in ("tiny", "direct"):
        rows = [r for r in claim["rows"] if r["decides"] and r["board"].endswith(f"· {world}")]
        verdicts = {r["verdict"] for r in rows}
        # as the findings page combines them: one verdict, several (inconclusive) or none (not measured)
        site = verdicts.pop() if len(verdicts) == 1 else "inconclusive" if verdicts else "not measured"
        first = re.search(r"\*\*(.+?)\*\*", cells[world]).group(1)  # the board's verdict leads the cell
        assert VERDICTS[first] == site, (number, world, cells[world][:80])


def test_each_studys_deciding_estimates_are_in_its_claims_row():
    assert RESULTS["studies"]
    for study in RESULTS["studies"]:
        for claim in study["findings"]:
            cell = _claim_row(claim["number"])[1]  # the studies are of the worked world
            for row in (r for r in claim["rows"] if r["decides"]):
                est = row["estimate"]
                if row["measure"].startswith("distillation share"):
                    text = _pct(est)
                elif row["measure"].startswith("savings") and est["value"] is None:  # never reached
                    # with seeds paired the note names the seeds on which it is never reached
                    seeds = re.search(r"never reaches it on seeds? ([\d, ]+)", row["note"])
                    text = "never reaches τ₀.₉" + (f" on seed {seeds.group(1).strip(', ')}" if seeds else "")
                elif row["measure"].startswith("savings"):
                    text = _pct(est)
                else:
                    text = f"{est['value']:.2f}x [{est['low']:.2f}, {est['high']:.2f}]"
                assert text in cell, (study["slug"], row["board"], row["measure"], text)


def test_each_claim_1_studys_final_accuracies_and_distillation_cost_are_the_readmes():
    """For each study of claim 1 the README cites both methods' final accuracy on math_code, where the
    study reads the claim; where the study gives opd-multi a larger budget than joint GRPO (seeds
    paired), also distillation's cost at half the experts' gain on each board."""
    studies = [s for s in RESULTS["studies"] if any(c["number"] == 1 for c in s["findings"])]
    assert studies
    for study in studies:
        (claim,) = [c for c in study["findings"] if c["number"] == 1]
        finals = [r for r in claim["rows"] if "final accuracy" in r["measure"] and r["board"].startswith("math_code")]
        assert len(finals) == 2, study["slug"]
        for row in finals:
            assert _acc(row["estimate"]) in README, (study["slug"], row["measure"])
        paired = any(r["measure"].endswith("seeds paired") for r in claim["rows"])
        assert not paired or study["distillation_cost"], study["slug"]
        for cost in study["distillation_cost"] if paired else []:
            assert _pct(cost["over_seeds"]["0.5"]) in README, (study["slug"], cost["board"])
