"""Hostile records: any value anywhere in a record either fails validation or builds a site, never crashes."""

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reports.site import build_site
from tests.reports.factory import make_record

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-10**20, 10**20) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=6,
)


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value[:3]):
            yield from _paths(v, prefix + (i,))


BASE = make_record(seed=1)
PATHS = [p for p in _paths(BASE) if p]


def _mutate(record, path, value):
    target = record
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return record


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(PATHS), _json)
def test_any_mutation_is_skipped_or_reported_never_a_crash(tmp_path_factory, path, value):
    root = tmp_path_factory.mktemp("fuzz")
    runs = root / "runs"
    for name, record in (("good", make_record(seed=0)), ("mutant", _mutate(json.loads(json.dumps(BASE)), path, value))):
        (runs / name).mkdir(parents=True)
        (runs / name / "summary.json").write_text(json.dumps(record), encoding="utf-8")
    summary = build_site([runs], root / "out")
    assert summary.n_records + summary.n_skipped == 2 and summary.n_records >= 1


def test_lone_surrogates_are_skipped_and_control_characters_are_text(tmp_path):
    runs = tmp_path / "runs"
    for name, method in (("a", "m\ud800"), ("b", "m\u0000\u202e<b>\U0001f600")):
        (runs / name).mkdir(parents=True)
        # json.dumps writes them as \uXXXX escapes, which is how a hostile file would carry them
        (runs / name / "summary.json").write_text(json.dumps(make_record(method=method, seed=0, run_id=name)))
    summary = build_site([runs], tmp_path / "out")
    assert summary.n_records == 1 and "unpaired surrogate" in summary.skipped[0][1]
    assert "&lt;b&gt;" in (tmp_path / "out" / "index.html").read_text(encoding="utf-8")
    for svg in (tmp_path / "out" / "plots").rglob("*.svg"):
        assert "\x00" not in svg.read_text(encoding="utf-8")  # XML forbids it: the figure would not load
