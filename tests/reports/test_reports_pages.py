"""What the pages tell a reader: colours, scale and method, the paper beside us, reproducing, samples, downloads."""

import html
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from markupsafe import escape

from reports.boards import build_boards
from reports.colours import FIXED, method_colour, method_colours
from reports.columns import COLUMNS
from reports.findings import PAPER_ID, PAPER_TITLE, findings
from reports.records import to_frames
from reports.reproduce import budget_text, run_command, seeds_text, site_command
from reports.site import build_site
from tests.reports.factory import GIT_COMMIT, make_record, make_sweep, write_runs

REPO = Path(__file__).resolve().parents[2]

CONFIG = {"lr": 0.0005, "use_reward_rule": True, "tags": ["a", "b"], "nested": {"x": 1}, "evil": "$(rm -rf ~)",
          "note": "it's", "teacher": None, "mixes": [[0.5, 0.5]]}
HOSTILE_PROMPT = "<script>alert(3)</script>"
HOSTILE_COMPLETION = "</pre><img src=x onerror=alert(4)> #42"
WORLDS = [{"profile": "tiny", "description": "worked answers: a ~1.3M student <b>", "rows": []},
          {"profile": "direct", "description": "direct answers of a few tokens", "rows": []}]


def _records():
    # opd-multi is 2nd on math_code and 4th on four_domain: a palette by position would give it two colours
    out = [make_record(m, "math_code", seed=s) for m in ("grpo-joint", "opd-multi", "sft") for s in range(3)]
    out += [make_record(m, "four_domain", seed=s) for m in ("grpo-joint", "grpo", "opd-external", "opd-multi")
            for s in range(3)]
    special = out[3]  # opd-multi, math_code, seed 0
    special["method_config"] = CONFIG
    special["samples"][-1].update(prompt=HOSTILE_PROMPT, completion=HOSTILE_COMPLETION)
    out[-4]["provenance"]["git_commit"] = None  # opd-external seed 2 on four_domain: made outside a git checkout
    for r in out[6:9]:  # sft's records predate samples
        del r["samples"]
    return out


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("pages")
    build_site([write_runs(_records(), root / "runs")], root / "out", generated="2026-01-01T00:00:00Z", worlds=WORLDS)
    return root / "out"


def _read(site, rel):
    return (site / rel).read_text(encoding="utf-8")


def _panel(index: str, slug: str) -> str:
    start = index.index(f'id="panel-{slug}"')
    return index[start:index.index("</section>", start)]


def test_colours_are_fixed_per_method_and_derived_for_others():
    assert len(set(FIXED.values())) == len(FIXED) == 7
    assert set(FIXED) == {"grpo-joint", "grpo", "opd-multi", "opd-external", "self-grpo", "sft", "recover"}
    assert re.fullmatch(r"#[0-9a-f]{6}", method_colour("my-plugin"))
    assert method_colour("my-plugin") != method_colour("other-plugin")
    assert method_colours(["sft", "opd-multi"]) == {"sft": FIXED["sft"], "opd-multi": FIXED["opd-multi"]}
    # the colour is the name's, not its place on a board
    assert method_colours(["opd-multi", "x"])["opd-multi"] == method_colours(["a", "b", "opd-multi"])["opd-multi"]


def test_a_derived_colour_is_the_same_in_every_process_whatever_its_hash_seed():
    """A plugin's colour is pinned: a fresh process with another PYTHONHASHSEED gives the same one."""
    code = "from reports.colours import method_colour; print(method_colour('my-plugin'))"
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO)}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                             cwd=REPO, timeout=60, check=True)
        assert out.stdout.strip() == method_colour("my-plugin") == "#4b30cf", seed


def test_a_method_has_one_colour_on_every_tab_figure_and_page(site):
    index = _read(site, "index.html")
    colour = FIXED["opd-multi"]
    for slug in ("math_code-easy-tiny", "four_domain-easy-tiny"):
        panel = _panel(index, slug)
        swatch = re.search(r'data-colour="(#[0-9a-f]{6})"><svg class="swatch"[^>]*><rect [^>]*fill="(#[0-9a-f]{6})"'
                           r'[^>]*/></svg><a class="method" href="methods/[^"]+/opd-multi.html"', panel)
        assert swatch and swatch.group(1) == swatch.group(2) == colour, slug
        for figure in ("curves", "frontier", "length", "m-opd-multi"):
            assert colour in _read(site, f"plots/{slug}/{figure}.svg"), (slug, figure)
        assert f'data-colour="{colour}"' in _read(site, f"methods/{slug}/opd-multi.html")
    assert FIXED["sft"] in _read(site, "plots/math_code-easy-tiny/curves.svg")
    assert FIXED["sft"] not in _read(site, "plots/four_domain-easy-tiny/curves.svg")


def test_the_index_says_what_scale_and_how_it_is_measured(site):
    index = _read(site, "index.html")
    tabs = index.index('role="tablist"')
    scale = index.index("small models trained on synthetic tasks")
    assert scale < tabs and index.index("worked answers: a ~1.3M student &lt;b&gt;") < tabs
    assert "direct answers of a few tokens" not in index[:tabs]  # a world with no board here is not "on this page"
    about = index[index.index('id="about"'):]
    for text in ("Held-out accuracy per counted training FLOP", "direct answers of a few tokens", "Budgets",
                 "3.00e14", "Recorded but not counted", "evaluation on held-out prompts",
                 "warm-up of the shared base model", "external teacher's own training",
                 "training of the experts (opd-multi) and stages (self-grpo)", "interquartile mean (IQM) from 3 seeds",
                 "95% percentile-bootstrap intervals", "2,000 replicates", PAPER_TITLE, PAPER_ID):
        assert text in html.unescape(about), text
    for page in ("index.html", "findings.html", "methods/math_code-easy-tiny/sft.html"):
        assert re.search(r'<nav[^>]*>.*href="(\.\./\.\./)?index.html#about">About</a>', _read(site, page), re.S), page


def test_every_finding_row_has_the_papers_figure_and_links_to_its_board(site):
    claims = findings(build_boards(to_frames(make_sweep(4 * 3 * 6, suites=("math_code", "four_domain"),
                                                        difficulties=("easy",)))))
    assert all(c.rows for c in claims)
    for c in claims:
        for r in c.rows:
            assert r.paper.strip(), (c.number, r.measure)
    page = _read(site, "findings.html")
    index = _read(site, "index.html")
    rows = re.findall(r'<tr[^>]*><td[^>]*><a class="board-link" href="index.html#([^"]+)">'
                      r'.*?<td class="num paper"[^>]*>(.*?)</td>', page)
    assert len(rows) >= 10
    for slug, paper in rows:
        assert paper.strip() and f'id="panel-{slug}"' in index


def test_index_cells_and_figures_link_onwards(site):
    index = _read(site, "index.html")
    panel = _panel(index, "math_code-easy-tiny")
    body_rows = re.findall(r"<tr( class=\"reference\")?>(.*?)</tr>", panel[panel.index("<tbody>"):], re.S)
    assert len(body_rows) == 3
    for row in body_rows:
        body = row[1]
        method_href = re.search(r'<a class="method" href="(methods/[^"]+\.html)"', body).group(1)
        cells = re.findall(r'<td class="num" data-sort[^>]*>(.*?)</td>', body)
        assert len(cells) == 1 + len(COLUMNS), body
        assert all(f'<a class="v" href="{method_href}">' in c for c in cells[1:]), body
        assert (site / method_href).is_file()
    for page in ("index.html", "methods/math_code-easy-tiny/opd-multi.html"):
        text = _read(site, page)
        images = re.findall(r'<img src="([^"]+)"', text)
        assert images and all(f'<a class="enlarge" href="{src}"' in text for src in images), page


def _command(page: str, run_id: str) -> str:
    start = page.index(f'<span class="path">{run_id}</span>')
    pre = re.search(r'<pre class="cmd">(.*?)</pre>', page[start:], re.S).group(1)
    return html.unescape(pre)


def test_each_run_has_its_command_commit_and_record(site):
    page = _read(site, "methods/math_code-easy-tiny/opd-multi.html")
    record = make_record("opd-multi", "math_code", seed=0)
    args = shlex.split(_command(page, record["run_id"]).replace("\\\n", " "))
    assert args[:2] == ["bench", "run"]
    options = dict(zip(args[2:], args[3:]))
    assert (options["--method"], options["--suite"], options["--difficulty"], options["--profile"],
            options["--seed"]) == ("opd-multi", "math_code", "easy", "tiny", "0")
    assert float(options["--budget"]) == record["budget_flops"] and options["--eval-size"] == "1000"
    sets = [args[i + 1] for i, a in enumerate(args) if a == "--set"]
    assert sets == ["evil=$(rm -rf ~)", "lr=0.0005", "nested.x=1", "note=it's", "tags=a,b", "teacher=none",
                    "use_reward_rule=true"]
    assert "Not expressible with <code>--set</code> (see the configuration above): mixes." in page
    # the other seeds' configuration is every field the record resolved, too
    other = shlex.split(_command(page, make_record("opd-multi", seed=1)["run_id"]).replace("\\\n", " "))
    assert [other[i + 1] for i, a in enumerate(other) if a == "--set"] == ["group_size=8", "lr=1e-05", "note=synthetic"]
    assert page.count(f'<code class="hash">{GIT_COMMIT}</code>') == 3
    links = re.findall(r'<a class="record-link" href="\.\./\.\./(records/[^"]+\.json)">', page)
    assert len(links) == 3
    assert {json.loads(_read(site, rel))["run_id"] for rel in links} == {
        make_record("opd-multi", seed=s)["run_id"] for s in range(3)}
    no_commit = _read(site, "methods/four_domain-easy-tiny/opd-external.html")
    assert no_commit.count("not recorded</span>") == 1


def test_the_site_command_and_the_records_commits_are_shown(site):
    for page in ("index.html", "findings.html"):
        text = _read(site, page)
        assert '<code class="cmd">bench reproduce --seeds 3 --profile tiny</code>' in text  # the records' world
        assert "the benchmark's whole sweep with seeds 0, 1 and 2 and builds" in text
        assert f'commit <code class="hash">{GIT_COMMIT}</code> (20 records); no recorded commit (1 record).' in text


def test_the_site_command_names_every_world_and_the_seeds_of_the_records():
    records = [make_record("grpo-joint", profile=p, seed=s) for p, s in (("tiny", 0), ("direct", 2), ("tiny", 1))]
    assert site_command(records) == "bench reproduce --seeds 3 --profile direct --profile tiny"
    assert site_command([make_record("grpo-joint", profile="my world")]) == \
        "bench reproduce --seeds 1 --profile 'my world'"
    assert [seeds_text(n) for n in (1, 2, 3, 10)] == ["seed 0", "seeds 0 and 1", "seeds 0, 1 and 2", "seeds 0-9"]


def test_run_command_names_the_model_folders_a_record_keeps_only_by_hash():
    record = make_record("grpo", profile="hf")
    record["provenance"]["model_hashes"] = {"base": "aa" * 8, "critic": "bb" * 8}
    assert run_command(record)["needs"] == [f"--model FOLDER (weights hash {'aa' * 8})",
                                            f"--teacher critic=FOLDER (weights hash {'bb' * 8})"]
    record["profile"] = "tiny"  # a built-in world's base and teacher are its own
    assert run_command(record)["needs"] == [f"--teacher critic=FOLDER (weights hash {'bb' * 8})"]


def test_run_command_quotes_and_reads_back():
    assert budget_text(3e14) == "3e14" and budget_text(2.5e13) == "2.5e13" and budget_text(123456789.0) == "123456789"
    record = make_record("a b;rm", suite="$(x)", method_config={"k": "v w"})
    args = shlex.split(run_command(record)["text"].replace("\\\n", " "))
    assert args[args.index("--method") + 1] == "a b;rm" and args[args.index("--suite") + 1] == "$(x)"
    assert args[-2:] == ["--set", "k=v w"]
    nested = make_record("opd-multi", method_config={"distill": {"lr": 0.001, "steps": 5}, "seed_offset": 2})
    text = run_command(nested)["text"]
    assert "--set distill.lr=0.001 --set distill.steps=5 --set seed_offset=2" in text
    assert text.startswith("bench run ")  # no thread count recorded: none set
    provenance = {**record["provenance"], "hardware": {**record["provenance"]["hardware"], "torch_threads": 1}}
    one_thread = run_command({**record, "provenance": provenance})["text"]
    assert shlex.split(one_thread.replace("\\\n", " "))[:3] == ["OMP_NUM_THREADS=1", "bench", "run"]
    # how the experts trained (one sampling stream, or one each) is part of the command
    args = shlex.split(run_command({**record, "provenance": {**provenance, "phase_executor": "sequential"}})["text"]
                       .replace("\\\n", " "))
    assert args[args.index("--phase-executor") + 1] == "sequential"
    # a plugin run from a file reruns from that file, not by a name nothing has registered
    plugin = {**record, "provenance": {**provenance, "method_source": "path/to/my method.py:Mine"}}
    args = shlex.split(run_command(plugin)["text"].replace("\\\n", " "))
    assert args[args.index("--method") + 1] == "path/to/my method.py:Mine"


def test_samples_are_on_the_method_page_escaped(site):
    page = _read(site, "methods/math_code-easy-tiny/opd-multi.html")
    assert page.count('<details class="run-samples"') == 3 and page.count('<details class="run-samples" open>') == 1
    # each run: an evaluation per curve point, the last open
    record = make_record("opd-multi", seed=1)
    assert page.count('<details class="evaluation"') == 3 * len(record["curve"])
    assert page.count('<details class="evaluation" open>') == 3
    first = record["samples"][-1]
    assert f'<pre class="prompt">{escape(first["prompt"])}</pre>' in page
    assert "&lt;script&gt;alert(3)&lt;/script&gt;" in page and HOSTILE_PROMPT not in page
    assert "&lt;/pre&gt;&lt;img src=x onerror=alert(4)&gt; #42" in page and "<img src=x" not in page
    assert "the base model, before training" in page and "of the budget) · accuracy" in page
    assert "carry no sample completions" not in page
    sft = _read(site, "methods/math_code-easy-tiny/sft.html")
    assert "The records of this method carry no sample completions." in sft


def test_results_csv_numbers_are_numbers(site):
    path = site / "results.csv"
    table = pd.read_csv(path)
    results = json.loads(_read(site, "results.json"))
    names = list(results["boards"][0]["methods"][0]["metrics"])
    numeric = ["budget_flops"] + [f"{n}{s}" for n in names for s in ("", "_low", "_high")]
    for column in numeric:
        assert table[column].dtype == "float64", (column, table[column].dtype)
    values = table[numeric].to_numpy()
    assert (values == float("-inf")).any()  # an unbounded interval end: a method never reaches a target
    assert pd.isna(values).any()  # undefined (e.g. no distillation): an empty cell, read as NaN
    assert not any(str(v).startswith("'") for v in table["savings_k90_low"])


def test_a_long_method_name_builds_its_page_and_figures(tmp_path):
    # names may be 200 characters: the slug is cut and hashed, and its figures' names stay safe
    name = "x" * 150
    summary = build_site([write_runs([make_record(name, seed=s) for s in range(2)] + [make_record("x" * 151)],
                                     tmp_path / "runs")], tmp_path / "out")
    methods = [p for p in summary.pages if p.startswith("methods/")]
    assert summary.n_records == 3 and len(methods) == 2
    svgs = [f for f in summary.files if f.endswith(".svg") and "/m-" in f]
    assert len(svgs) == 2 and all((tmp_path / "out" / f).is_file() for f in svgs)
