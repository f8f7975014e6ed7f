"""Method registry: built-ins, file plugins, protocol checks and did-you-mean errors."""

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
