"""Method registry: built-ins, file plugins, protocol checks and did-you-mean errors."""

import re

import pytest

from bench.api import AdapterError, check_method_class
from bench.errors import UnknownNameError
from bench.registry import get_method, method_names

GOOD_PLUGIN = '''
from dataclasses import dataclass

@dataclass(frozen=True)
class Cfg:
    lr: float = 1e-3

class Noop:
    name = "noop"
    Config = Cfg
    def __init__(self, config): self.config = config
    def run(self, ctx): return None
'''


def test_builtin_methods_resolve_and_satisfy_the_protocol():
    assert {"grpo", "grpo-joint"} <= set(method_names())
    for name in method_names():
        cls = get_method(name)
        assert cls.name == name


def test_unknown_method_says_did_you_mean():
    with pytest.raises(UnknownNameError) as exc:
        get_method("grpo-jiont")
    msg = str(exc.value)
    assert "did you mean 'grpo-joint'" in msg and "\n" not in msg


def test_file_plugin_loads(tmp_path):
    path = tmp_path / "plug.py"
    path.write_text(GOOD_PLUGIN)
    cls = get_method(f"{path}:Noop")
    assert cls.name == "noop"


@pytest.mark.parametrize(
    "source, needle",
    [
        ("class Noop:\n    pass\n", "needs a non-empty class attribute `name: str`"),
        (GOOD_PLUGIN.replace("frozen=True", "frozen=False"), "frozen"),
        ("raise RuntimeError('boom')\n", "failed to import: RuntimeError: boom"),
        ("x = (\n", "failed to import: SyntaxError"),
        (GOOD_PLUGIN.replace('name = "noop"', 'name = "noop"\n    reads_heldout = True'), "`reads_heldout`, where set"),
        (GOOD_PLUGIN.replace('name = "noop"', 'name = "noop"\n    reads_heldout = " "'), "`reads_heldout`, where set"),
    ],
)
def test_malformed_plugins_get_one_clear_error(tmp_path, source, needle):
    path = tmp_path / "bad.py"
    path.write_text(source)
    with pytest.raises(AdapterError) as exc:
        get_method(f"{path}:Noop")
    assert needle in str(exc.value)


def test_missing_plugin_file_and_class(tmp_path):
    with pytest.raises(AdapterError, match="not found"):
        get_method(f"{tmp_path}/nope.py:X")
    path = tmp_path / "plug.py"
    path.write_text(GOOD_PLUGIN)
    with pytest.raises(AdapterError, match="no class 'Missing'"):
        get_method(f"{path}:Missing")


def test_check_method_class_rejects_instances():
    with pytest.raises(AdapterError, match="expected a class"):
        check_method_class(object())


def test_a_config_field_without_a_default_is_refused_when_the_method_is_loaded(tmp_path):
    """`bench run` builds `Config()` before it applies `--set`: a field without a default made every
    run fail ("missing 1 required positional argument: 'lr'", with `--set lr=...` given) and
    `bench list methods -v` list the method as unusable; the registration check names the field."""
    path = tmp_path / "nodefault.py"
    path.write_text(GOOD_PLUGIN.replace("lr: float = 1e-3", "lr: float\n    samples: int = 4"))
    with pytest.raises(AdapterError, match="Cfg field 'lr' has no default: every config field needs one"):
        get_method(f"{path}:Noop")
    with_field = GOOD_PLUGIN.replace("from dataclasses import dataclass", "from dataclasses import dataclass, field")
    nested = with_field.replace("class Cfg:", "class Inner:\n    kl: float\n\n@dataclass(frozen=True)\nclass Cfg:")
    inner = "lr: float = 1e-3\n    inner: Inner = field(default_factory=Inner)"
    path.write_text(nested.replace("lr: float = 1e-3", inner))
    with pytest.raises(AdapterError, match="Inner field 'kl' has no default"):  # a nested config made by its factory
        get_method(f"{path}:Noop")
    fields = "lr: float = 1e-3\n    ids: list = field(default_factory=list)\n    seen: int = field(init=False)"
    path.write_text(with_field.replace("lr: float = 1e-3", fields))
    assert get_method(f"{path}:Noop").name == "noop"  # a default_factory is a default; `Config()` leaves out seen


def test_a_file_named_without_its_class_is_told_to_name_it(tmp_path):
    """`--method path/to/file.py` (no `:Class`) was "unknown method ...; known methods: grpo, ..."."""
    path = tmp_path / "plug.py"
    path.write_text(GOOD_PLUGIN)
    with pytest.raises(UnknownNameError, match=r"is named with its class, path/to/file.py:ClassName \(") as exc:
        get_method(str(path))
    assert str(exc.value).endswith(f"({path}:ClassName)")
    with pytest.raises(UnknownNameError, match="named with its class, path/to/file.py:ClassName$"):
        get_method("plugins/rloo")
    with pytest.raises(UnknownNameError, match="known methods: .*did you mean 'grpo-joint'"):
        get_method("grpo-jiont")  # a name that is not a file's keeps the known names


def test_a_file_plugin_is_loaded_as_one_file(tmp_path):
    """As docs/plugins.md says: the file's folder is not put on the import path, so a module beside it
    cannot be imported (a plugin split into modules is packaged)."""
    (tmp_path / "helpers_beside_the_plugin.py").write_text("LR = 1e-3\n")
    path = tmp_path / "split.py"
    path.write_text("import helpers_beside_the_plugin\n" + GOOD_PLUGIN)
    with pytest.raises(AdapterError, match="failed to import: ModuleNotFoundError: No module named 'helpers_beside"):
        get_method(f"{path}:Noop")


def test_a_world_gives_built_in_methods_its_calibrated_rates_beneath_the_users_set(tmp_path):
    """The worked world's GRPO steps default to its calibrated rate in every built-in method that
    takes GRPO steps; `--set` still wins; a world without calibrated defaults keeps the library's."""
    from bench.run.config import RunConfig
    from bench.run.runner import Runner
    from bench.world.profiles import PROFILES
    from methods.distill import DistillStepConfig
    from methods.grpo import GRPOStepConfig

    def config(method: str, profile: str, *overrides: tuple[str, str]):
        return Runner(RunConfig(method=method, profile=profile, runs_dir=tmp_path, overrides=overrides),
                      progress=False).method_config

    grpo = float(dict(PROFILES["tiny"].defaults_for("grpo"))["lr"])
    assert grpo != GRPOStepConfig().lr
    assert config("grpo-joint", "tiny").lr == grpo and config("opd-multi", "tiny").expert.lr == grpo
    assert config("self-grpo", "tiny").stage.lr == grpo and config("recover", "tiny").grpo.lr == grpo
    assert config("opd-multi", "tiny").distill.lr == config("opd-external", "tiny").distill.lr
    # the recovery protocol's arms have rates of their own, calibrated for recovering; its stages keep GRPO's
    recover = config("recover", "tiny")
    assert recover.grpo_arm_lr == recover.distill.lr == 1.25e-4 and recover.grpo.lr == grpo
    assert config("recover", "direct").grpo_arm_lr == 0.0
    assert config("grpo-joint", "tiny", ("lr", "1e-3")).lr == 1e-3
    assert config("opd-multi", "tiny", ("expert.lr", "1e-3")).expert.lr == 1e-3
    assert config("grpo-joint", "direct").lr == GRPOStepConfig().lr
    assert config("opd-external", "direct").distill.lr == DistillStepConfig().lr


def test_the_hf_profile_steps_pretrained_models_at_fine_tuning_rates():
    """Real models get full fine-tuning rates (TRL's GRPO and SFT defaults), not the rates set for
    small models trained from scratch, in every built-in method."""
    from bench.world.profiles import PROFILES
    from methods.grpo import GRPOStepConfig

    hf = PROFILES["hf"]
    rates = {(method, key): float(value) for method in ("grpo", "grpo-joint", "opd-multi", "opd-external",
                                                         "self-grpo", "recover", "sft")
             for key, value in hf.defaults_for(method) if key.endswith("lr")}
    assert len(rates) == 10 and rates.pop(("sft", "lr")) == 2e-5
    assert set(rates.values()) == {1e-6} and GRPOStepConfig().lr >= 100 * 1e-6  # the library's: for small models


def test_the_worked_worlds_distillation_stops_by_its_calibrated_rules(tmp_path):
    """Every built-in method that stops distillation by the per-token reverse-KL rule uses the
    threshold the world's shipped calibration chose, and the accuracy rule only where the calibration
    kept it; the direct world keeps the library's rules."""
    from bench.run.config import RunConfig
    from bench.run.runner import Runner
    from bench.world.regime import load_calibration
    from methods.distill import DistillConfig

    rule = load_calibration("tiny")["criteria"]["stop_rule"]
    chosen, library = rule["threshold"], DistillConfig()
    assert chosen is not None and chosen != library.kl_threshold
    for method in ("opd-multi", "self-grpo", "opd-external"):
        for profile, expected in (("tiny", (chosen, rule["reward_rule"]["kept"])),
                                  ("direct", (library.kl_threshold, library.use_reward_rule))):
            run = Runner(RunConfig(method=method, profile=profile, runs_dir=tmp_path), progress=False)
            distill = run.method_config.distill
            assert (distill.kl_threshold, distill.use_reward_rule) == expected, (method, profile)


TYPED_PLUGIN = '''
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from a_module_only_a_type_checker_has import Thing

@dataclass(frozen=True)
class Cfg:
    clip: Optional[float] = None
    scale: float = 1
    ids: tuple[int, ...] = (0,)
    names: tuple[str, ...] = ()
    cap: int | None = 4
    pair: tuple[float, float] = (0.1, 0.2)
    ks: list[int] = field(default_factory=list)
    mix: int | float = 3
    thing: Thing | None = None  # unresolvable: the other fields are still read by their own types
    loose: float = None  # annotated without Optional, its default None

class Typed:
    name = "typed"
    Config = Cfg
    def __init__(self, config): self.config = config
    def run(self, ctx): return None
'''


def test_overrides_are_parsed_as_the_fields_declared_types(tmp_path):
    from bench.errors import RunError
    from bench.run.config import method_config

    path = tmp_path / "typed.py"
    path.write_text(TYPED_PLUGIN)
    cls = get_method(f"{path}:Typed")
    config = method_config(cls, (("clip", "0.5"), ("scale", "0.5"), ("ids", "1,2"), ("names", "a,b"), ("cap", "none")))
    assert (config.clip, config.scale, config.ids, config.names, config.cap) == (0.5, 0.5, (1, 2), ("a", "b"), None)
    assert method_config(cls, (("clip", "None"), ("cap", "8"))).cap == 8  # was: clip '0.5' a string, scale refused
    config = method_config(cls, (("pair", "0.3,0.4"), ("ks", "5,6"), ("mix", "2.5")))
    assert (config.pair, config.ks, config.mix) == ((0.3, 0.4), [5, 6], 2.5)
    assert method_config(cls, (("mix", "2"),)).mix == 2 and type(method_config(cls, (("mix", "2"),)).mix) is int
    for key, raw, said in [("ids", "1,x", "ids='x': expected int"), ("clip", "big", "clip='big': expected float"),
                           ("pair", "1", "pair='1': expected 2 comma-separated values"),
                           ("mix", "x", "mix='x': expected int or float")]:
        with pytest.raises(RunError, match=said):
            method_config(cls, ((key, raw),))


UNPARSABLE_PLUGIN = '''
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional

@dataclass(frozen=True)
class Cfg:
    layers: list = field(default_factory=list)
    table: dict = field(default_factory=dict)
    weights: dict[str, float] = field(default_factory=dict)
    maybe: Optional[list] = None
    where: Path = Path(".")
    mode: Literal["a", "b"] = "a"
    anything: Any = None
    counted: Any = 3
    bare: tuple = ()

class Loose:
    name = "loose"
    Config = Cfg
    def __init__(self, config): self.config = config
    def run(self, ctx): return None
'''


def test_a_setting_of_a_type_set_cannot_parse_is_refused(tmp_path):
    """`--set layers=1,2` on a plain `list` field stored the string '1,2'; a type `--set` cannot read is
    one line naming the key and the type; `str`, `Any`, `Literal` and a plain `tuple` still read."""
    from bench.errors import RunError
    from bench.run.config import method_config

    path = tmp_path / "loose.py"
    path.write_text(UNPARSABLE_PLUGIN)
    cls = get_method(f"{path}:Loose")
    for key, raw, typ in [("layers", "1,2", "list"), ("table", "a=1", "dict"), ("weights", "a", "dict[str, float]"),
                          ("maybe", "1", "Optional[list]"), ("where", "/tmp", "Path")]:
        with pytest.raises(RunError, match=rf"^{key}: --set cannot parse a value of type {re.escape(typ)} \(it parses"):
            method_config(cls, ((key, raw),))
    assert method_config(cls, (("maybe", "none"),)).maybe is None
    config = method_config(cls, (("mode", "b"), ("anything", "x,y"), ("counted", "4"), ("bare", "p,q")))
    assert (config.mode, config.anything, config.counted, config.bare) == ("b", "x,y", 4, ("p", "q"))
    with pytest.raises(RunError, match="mode='c': expected one of a, b"):
        method_config(cls, (("mode", "c"),))


def test_a_records_rerun_command_sets_its_config_back(tmp_path):
    """The site's command that reruns a record (`reports.reproduce.run_command`), read by `--set`, gives
    the run's config back: None values (`none`), tuples and lists included (nested keys: the site's
    tests)."""
    import dataclasses
    import json
    import shlex

    from bench.run.config import method_config
    from reports.reproduce import run_command

    path = tmp_path / "typed.py"
    path.write_text(TYPED_PLUGIN)
    cls = get_method(f"{path}:Typed")
    config = method_config(cls, (("cap", "none"), ("clip", "0.5"), ("ks", "5,6"), ("pair", "0.3,0.4")))
    record = {"method": "typed", "suite": "math", "difficulty": "easy", "profile": "smoke", "seed": 0,
              "budget_flops": 1e11, "method_config": json.loads(json.dumps(dataclasses.asdict(config)))}
    command = run_command(record)
    args = shlex.split(command["text"].replace("\\\n", " "))
    sets = tuple(tuple(args[i + 1].split("=", 1)) for i, arg in enumerate(args) if arg == "--set")
    assert command["unset"] == [] and len(sets) == len(dataclasses.fields(config))
    assert method_config(cls, sets) == config
    assert (config.cap, config.thing, config.loose) == (None, None, None)


def test_list_methods_shows_a_file_plugins_settings(tmp_path):
    from typer.testing import CliRunner

    from bench.cli import app

    path = tmp_path / "typed.py"
    loads = tmp_path / "loads.txt"  # the plugin's module code runs once per load
    path.write_text(TYPED_PLUGIN + f"\nopen({str(loads)!r}, 'a').write('load ')\n")
    out = CliRunner().invoke(app, ["list", "methods", "-v", f"{path}:Typed", "sft"])
    assert out.exit_code == 0, out.output
    assert "    --set clip=...  (Optional[float], default None)" in out.output and "sft: " in out.output
    assert loads.read_text() == "load "  # loaded once: checked, then listed from the same class
    assert "grpo" not in out.output  # only the methods named
    missing = CliRunner().invoke(app, ["list", "methods", f"{tmp_path / 'absent.py'}:Typed"])
    assert missing.exit_code == 2 and "method plugin file not found" in missing.output


def _installed(site, entry_points: dict[str, str], source: str, module: str = "mine") -> None:
    """A package `module` installed in `site` (a folder on sys.path) with these method entry points."""
    (site / f"{module}.py").write_text(source)
    info = site / f"{module}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    lines = "".join(f"{name} = {ref}\n" for name, ref in entry_points.items())
    (info / "entry_points.txt").write_text(f"[opd_bench.methods]\n{lines}")


def test_an_installed_method_is_named_as_its_entry_point(tmp_path, monkeypatch):
    """Runs are named by the class's `name`: a plugin installed as `other` calling itself `noop` would
    share `noop`'s runs (another package's, say), whose record `bench run` would hand back."""
    _installed(tmp_path, {"noop": "mine:Noop", "other": "mine:Noop"}, GOOD_PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert get_method("noop").name == "noop"
    with pytest.raises(AdapterError, match="plugin 'other' .mine:Noop. calls itself 'noop'; an installed method's"):
        get_method("other")
    # its own file is the installed method (an editable install), not another method of that name
    assert get_method(f"{tmp_path / 'mine.py'}:Noop") is get_method("noop")  # one method, one code hash
    copy = tmp_path / "copy" / "mine.py"
    copy.parent.mkdir()
    copy.write_text(GOOD_PLUGIN)  # another file calling itself noop is refused, as before
    with pytest.raises(AdapterError, match="calls itself 'noop', the name of another method"):
        get_method(f"{copy}:Noop")


def test_a_broken_installed_plugin_is_listed_with_its_error_beside_the_others(tmp_path, monkeypatch):
    import json

    from typer.testing import CliRunner

    from bench.cli import app

    _installed(tmp_path, {"broken": "broken_mine:Noop"}, "import not_a_module_anywhere\n", "broken_mine")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = CliRunner().invoke(app, ["list", "methods", "-v"])
    assert out.exit_code == 0, out.output
    assert "broken: cannot be used: method plugin 'broken' failed to load: ModuleNotFoundError" in out.output
    assert "grpo-joint: " in out.output and "--set lr=..." in out.output  # was: a traceback, nothing listed
    rows = {row["name"]: row for row in json.loads(CliRunner().invoke(app, ["list", "methods", "--json"]).stdout)}
    assert "failed to load" in rows["broken"]["error"] and rows["grpo"]["config"]


def test_a_plugins_code_hash_covers_its_package_or_its_namespace_folder(tmp_path, monkeypatch):
    import importlib

    from bench.run.provenance import method_code

    folder = tmp_path / "acme_ns" / "tools"  # a namespace package (no __init__.py), then a package
    folder.mkdir(parents=True)
    (tmp_path / "acme_ns" / "plug.py").write_text(GOOD_PLUGIN)
    (folder / "__init__.py").write_text("")
    (folder / "plug.py").write_text(GOOD_PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    in_namespace = importlib.import_module("acme_ns.plug").Noop
    in_package = importlib.import_module("acme_ns.tools.plug").Noop
    before = method_code(in_namespace), method_code(in_package)  # was: a TypeError for the namespace
    (folder / "helpers.py").write_text("X = 1\n")  # a module of the package, beside the method's
    assert method_code(in_package) != before[1] and method_code(in_namespace) != before[0]
