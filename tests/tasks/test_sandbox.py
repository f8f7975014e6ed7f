"""The code sandbox: a right program passes; loops, memory bombs, sockets, new processes, early exits
and output floods fail, within their limits, and never raise."""

from __future__ import annotations

import pytest

from tasks.sandbox import MAX_OUTPUT_BYTES, OUTPUT_TAIL_CHARS, has_unshare_net, run_python


def test_a_right_program_passes():
    result = run_python("def f(x):\n    return x + 1\n\nassert f(1) == 2\n")
    assert result.passed and result.status == "ok"


def test_a_failing_assert_fails():
    result = run_python("assert 1 == 2\n")
    assert not result.passed and result.status == "failed" and "AssertionError" in result.output


def test_an_infinite_loop_times_out():
    result = run_python("while True:\n    pass\n", timeout_s=1)
    assert not result.passed and result.status == "timeout" and result.wall_s < 5


@pytest.mark.parametrize("bomb", ["x = bytearray(8 << 30)", "x = []\nwhile True:\n    x.append(bytearray(10 << 20))"])
def test_a_memory_bomb_is_stopped(bomb):
    result = run_python(bomb, memory_mb=512, timeout_s=10)
    assert not result.passed and result.status in ("failed", "killed") and result.wall_s < 10


@pytest.mark.parametrize("attempt", [
    "import socket\nsocket.create_connection(('127.0.0.1', 80), timeout=1)",
    "import socket\ns = socket.socket()\n",
    "import urllib.request\nurllib.request.urlopen('http://example.com', timeout=1)",
])
def test_network_is_refused(attempt):
    result = run_python(attempt, timeout_s=5)
    assert not result.passed and result.status == "failed"


@pytest.mark.parametrize("attempt", ["import os\nos.system('true')", "import subprocess\nsubprocess.run(['true'])",
                                     "import os\nos.fork()", "import ctypes\nctypes.CDLL(None)"])
def test_new_processes_and_ctypes_are_refused(attempt):
    result = run_python(attempt, timeout_s=5)
    assert not result.passed and "not allowed in the OPD-Bench sandbox" in result.output


@pytest.mark.parametrize("exit_early", ["import sys\nsys.exit(0)", "import os\nos._exit(0)", "raise SystemExit"])
def test_exiting_before_the_tests_does_not_pass(exit_early):
    result = run_python(exit_early + "\nassert False\n")
    assert not result.passed


def test_output_flooding_is_bounded(tmp_path):
    result = run_python("import sys\nwhile True:\n    print('x' * 10000)\n    sys.stderr.write('y' * 10000)\n",
                        timeout_s=5)
    assert not result.passed and result.status in ("killed", "failed", "timeout")
    assert len(result.output) <= OUTPUT_TAIL_CHARS and MAX_OUTPUT_BYTES <= 1 << 20


def test_the_environment_is_empty_and_the_folder_temporary():
    result = run_python("import os, sys\nassert not os.environ.get('HOME')\nassert os.getcwd().rsplit('/', 1)[-1]"
                        ".startswith('opd-sandbox-')\nopen('scratch.txt', 'w').write('ok')\n")
    assert result.passed, result.output


def test_hostile_source_text_never_raises():
    for program in ["\udcff", "\x00", "def (", "'" * 100000]:
        assert not run_python(program, timeout_s=5).passed


@pytest.mark.skipif(not has_unshare_net(), reason="unshare -rn is not allowed here")
def test_inside_a_network_namespace_only_loopback_exists():
    program = ("lines = open('/proc/self/net/dev').read().splitlines()[2:]\n"
               "names = [line.split(':')[0].strip() for line in lines]\n"
               "assert names == ['lo'], names\n")
    result = run_python(program)
    assert result.passed, result.output


def test_the_program_cannot_raise_its_limits():
    result = run_python("import resource\nresource.setrlimit(resource.RLIMIT_AS, (-1, -1))\n")
    assert not result.passed and "ValueError" in result.output


@pytest.mark.parametrize("swap", ["os.symlink('/dev/zero', 'output.txt')"])  # a FIFO it cannot make
def test_a_program_that_swaps_its_output_file_cannot_stall_the_reader(swap):
    # the program owns its folder: its output is read through the handle it was given, never by name
    result = run_python(f"import os\nos.remove('output.txt')\n{swap}\nprint('done')\n", timeout_s=5)
    assert result.passed and result.output.startswith("done\n") and len(result.output) <= OUTPUT_TAIL_CHARS


def test_a_process_started_below_the_audit_hooks_is_refused():
    # _posixsubprocess.fork_exec raises no audit event; the module is not imported at all
    result = run_python("import _posixsubprocess\n", timeout_s=5)
    assert not result.passed and "not allowed in the OPD-Bench sandbox: import _posixsubprocess" in result.output


# Code that would pass every problem without solving any: find the token that proves the tests ran,
# print it and leave before they run. Each reads where a token could be: the program's own file and
# folder, the command line, stdin, the other thread's frames, the garbage collector's objects, the
# interpreter's memory.
FIND_AND_LEAVE = [
    "src = open(sys.argv[0]).read()",
    "src = ''.join(open(f, errors='replace').read() for f in os.listdir('.') if os.path.isfile(f))",
    "src = open('/proc/self/cmdline', 'rb').read().decode('latin-1')",
    "src = sys.stdin.read() if not sys.stdin.closed else open('/proc/self/fd/0').read()",
    "src = str([f.f_locals for f in sys._current_frames().values()])",
    "import gc\nsrc = str([o for o in gc.get_objects() if isinstance(o, (bytes, list, dict))])",
    "src = open('/proc/self/mem', 'rb').read(1 << 20).decode('latin-1')",
    "src = open(b'//proc/self/mem', 'rb').read(1 << 20).decode('latin-1')",
    "src = os.read(os.open('mem', os.O_RDONLY, dir_fd=os.open('/proc/self', os.O_RDONLY)), 1 << 20).decode('latin-1')",
    "import threading\nsrc = str([(t._target, t._args) for t in threading.enumerate()])",
    "src = str([(f.f_locals, f.f_back and f.f_back.f_locals) for f in [sys._getframe(1)]])",
]


@pytest.mark.parametrize("find", FIND_AND_LEAVE)
def test_a_program_cannot_find_the_token_and_leave_before_the_tests(find):
    program = (f"import os, re, sys\n{find}\n"
               "for token in re.findall(r'[0-9a-f]{32}', src):\n    print(token)\nsys.stdout.flush()\nos._exit(0)\n"
               "assert False  # the tests it would skip\n")
    assert not run_python(program, timeout_s=5).passed


def test_the_program_runs_as_main_with_the_standard_library_whole():
    """Frames, tracebacks, named tuples and type variables (which read their caller's frame), signal
    handlers, pickled classes of its own, its own source, an empty stdin and doctest all work."""
    program = ("import collections, doctest, inspect, pickle, re, signal, sys, traceback, typing\n"
               "signal.signal(signal.SIGALRM, lambda *a: None)\nclass C:\n    pass\n"
               "assert isinstance(pickle.loads(pickle.dumps(C())), C) and 'pass' in inspect.getsource(C)\n"
               "assert sys.stdin.read() == ''\ndoctest.testmod()\n"
               "P = collections.namedtuple('P', 'a b')\nT = typing.TypeVar('T')\n"
               "try:\n    1 / 0\nexcept ZeroDivisionError:\n    assert 'ZeroDivisionError' in traceback.format_exc()\n"
               "assert inspect.currentframe().f_code.co_name == '<module>' and re.match('a', 'ab')\n"
               "import sys\nsys.setrecursionlimit(10000)\n"
               "def depth(n):\n    return 0 if n == 0 else 1 + depth(n - 1)\nassert depth(3000) == 3000\n")
    result = run_python(program, timeout_s=10)
    assert result.passed, result.output
    assert not run_python("import sys\nsys.exit(0)\nassert False\n").passed  # leaving early never passes


ELSEWHERE = [
    "open(TARGET, 'w').write('x')",
    "open(TARGET, 'a').write('x')",
    "os.close(os.open(TARGET, os.O_WRONLY | os.O_CREAT))",
    "pathlib.Path(TARGET).write_text('x')",
    "os.remove(TARGET)",
    "os.rename(TARGET, 'taken')",
    "open('here', 'w').close()\nos.replace('here', TARGET)",
    "os.chmod(TARGET, 0o777)",
    "os.utime(TARGET, (0, 0))",
    "os.truncate(TARGET, 0)",
    "shutil.rmtree(os.path.dirname(TARGET))",
    "os.symlink(TARGET, 'link')\nopen('link', 'w').write('x')",
    "os.chdir(os.path.dirname(TARGET))\nopen(os.path.basename(TARGET), 'w').write('x')",
    "os.mkdir(TARGET + '.d')",
    "d = os.open(os.path.dirname(TARGET), os.O_RDONLY)\nos.close(os.open('new', os.O_WRONLY | os.O_CREAT, dir_fd=d))",
    "os.mkdir('new', dir_fd=os.open(os.path.dirname(TARGET), os.O_RDONLY))",
    "os.chmod(os.open(TARGET, os.O_RDONLY), 0o777)",
    "import sqlite3\nsqlite3.connect(TARGET + '.db').execute('create table t (x int)')",
    "import sqlite3\nsqlite3.connect('file:' + TARGET + '.db?mode=rwc', uri=True).execute('create table t (x int)')",
]
UNAUDITED = ["os.mkfifo(TARGET + '.fifo')", "os.mknod(TARGET + '.node')", "import posix\nposix.mknod(TARGET + '.n')",
             "os.chroot('/')"]


@pytest.mark.parametrize("change", ELSEWHERE)
def test_a_program_changes_no_file_outside_its_folder(change, tmp_path):
    target = tmp_path / "harness.py"
    target.write_text("kept")
    before = target.stat()
    program = f"import os, pathlib, shutil\nTARGET = {str(target)!r}\n{change}\n"
    result = run_python(program, timeout_s=5)
    assert not result.passed and "not allowed in the OPD-Bench sandbox" in result.output, result.output
    assert target.read_text() == "kept" and sorted(p.name for p in tmp_path.iterdir()) == ["harness.py"]
    after = target.stat()
    assert (after.st_mode, after.st_mtime_ns) == (before.st_mode, before.st_mtime_ns)


@pytest.mark.parametrize("call", UNAUDITED)
def test_calls_that_make_files_without_an_audit_event_are_gone(call, tmp_path):
    target = tmp_path / "harness.py"
    target.write_text("kept")
    result = run_python(f"import os\nTARGET = {str(target)!r}\n{call}\n", timeout_s=5)
    assert not result.passed and "has no attribute" in result.output, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["harness.py"]


def test_a_program_changes_files_in_its_own_folder_as_it_likes():
    program = ("import os, shutil, tempfile\nos.mkdir('d')\nopen('d/a', 'w').write('1')\nos.rename('d/a', 'd/b')\n"
               "os.symlink('d/b', 'c')\nopen('c', 'a').write('2')\nassert open('d/b').read() == '12'\n"
               "os.chmod('d/b', 0o600)\nos.remove('c')\nshutil.rmtree('d')\nopen(os.devnull, 'w').write('x')\n"
               "os.mkdir('w')\nopen('w/f', 'w').write('x')\nhome = os.getcwd()\nos.chdir('/')\n"
               "shutil.rmtree(home + '/w')\nassert not os.path.exists(home + '/w')\n"
               "assert open('/etc/hostname').read() is not None\n")
    result = run_python(program, timeout_s=10)
    assert result.passed, result.output
