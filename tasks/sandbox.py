"""Run untrusted Python (a model's code with a benchmark's tests) in a limited subprocess.

    result = run_python(program, timeout_s=10)
    result.passed          # True only if the program exited 0 within its limits

What limits the program, all at once (defence in depth, not a security boundary: run untrusted
models' code in a container or VM as well):

- a fresh `python -I` (isolated: no environment variables, no user site, no script folder on the path)
  started with an empty environment in a new temporary working directory that is deleted afterwards;
- `resource.setrlimit` before its first line runs: address space (`memory_mb`), CPU seconds, the size of any
  file it writes (which also bounds its output, written to a file), no core dumps;
- a wall-clock limit (`timeout_s`) after which its whole process group is killed;
- no network: on Linux inside `unshare -rn` (a new, empty network namespace) when the kernel allows
  it; in every case an audit hook, installed before the program runs, refuses sockets, new processes
  (`subprocess`, `os.system`, `os.fork`, `exec*`, `spawn*`, and the `_posixsubprocess` module, whose
  `fork_exec` raises no audit event) and `ctypes`;
- files change only in its own folder: the audit hook refuses writing, creating, removing, renaming,
  linking or changing the mode, owner or times of a file anywhere else (links followed; a path read
  from the folder or descriptor it is relative to), opening a folder elsewhere (whose descriptor
  would lead there) and a database file elsewhere; `os.mkfifo`, `os.mknod` and `os.chroot`, which
  raise no audit event, are removed; so a program cannot rewrite the harness, the tests or the
  Python it runs on;
- its output is read back through the handle it was written to, never by name: the program owns its
  folder and could put a FIFO or a link to an endless file where the output file was.

A program passes when it runs to its end and the child then prints a random token and exits with
status 0, so that model code which leaves early (`sys.exit(0)`, `os._exit(0)`) before the tests run
does not pass. The token is in no file and in no code the program can read: it comes on stdin,
ahead of the program's source, to a thread that keeps it in its own frame; stdin is then closed
(and reopened empty) and the program runs as `__main__` in the main thread. Reading another
thread's frames, tracing every thread, the garbage collector's object lists and any file named
`mem` are refused, so code that looks for the token where a generic search would (its own source,
folder, command line, stdin, memory) finds none; code written against this harness's internals
(the runner's frames above its own) still could: the check stops early exits and generic
searches, not a determined adversary, as the limits above stop accidents and casual escapes, not
a determined one.
Whatever the program does (crash, loop, allocate, flood its output, raise), `run_python` returns a
result and never raises on its account.
"""

from __future__ import annotations

import functools
import os
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

TIMEOUT_S = 10.0
MEMORY_MB = 1024
# The program's stdout and stderr together go to one file no larger than this (RLIMIT_FSIZE).
MAX_OUTPUT_BYTES = 1 << 20
# How much of that output a result keeps, for a message.
OUTPUT_TAIL_CHARS = 1000

# The child's whole script (`python -I -c`): limits it cannot raise again (soft = hard), an audit hook,
# then the program, read from stdin after the token that proves it ran to its end. Setting the limits
# here rather than in a `preexec_fn` keeps `Popen` safe in a threaded evaluator. The token is in no
# file and no code object: a daemon thread reads stdin, hands the program's source over and keeps the
# token in its own frame, which no frame of the program leads to, until the main thread, having run
# the program as `__main__` to its end, tells it to print it. The ways to another thread's frames
# and to the interpreter's memory (`sys._current_frames`, tracing every thread, the garbage
# collector's object lists, any file named `mem`) are refused.
_RUNNER = """\
import linecache as _linecache, os as _os, resource as _resource, sys as _sys, threading as _threading
import types as _types
for _limit, _value in {limits!r}:
    _hard = _resource.getrlimit(_limit)[1]
    _value = _value if _hard == _resource.RLIM_INFINITY else min(_value, _hard)
    _resource.setrlimit(_limit, (_value, _value))
_opd_bench_home = _os.path.realpath(_os.getcwd())  # the program's own temporary folder
for _unaudited in ("mkfifo", "mknod", "chroot"):  # they make files (or move the root) without an audit event
    for _module in (_os, _sys.modules.get("posix")):
        if _module is not None and hasattr(_module, _unaudited):
            delattr(_module, _unaudited)
def _opd_bench_outside(path, dir_fd=-1, _real=_os.path.realpath, _join=_os.path.join, _text=_os.fsdecode,
                       _cwd=_os.getcwd, _link=_os.readlink, _home=_opd_bench_home + "/"):
    # where a path leads, links followed, from the folder it is relative to (a descriptor's, else the
    # one the program is in now): anywhere but the program's own folder or /dev/null. A descriptor is
    # the file it was opened on (a pipe or a socket is no file); one that cannot be read is outside.
    try:
        if isinstance(path, int):
            path = _link("/proc/self/fd/" + str(path))
            if not path.startswith("/"):
                return False
        base = _link("/proc/self/fd/" + str(dir_fd)) if isinstance(dir_fd, int) and dir_fd >= 0 else _cwd()
        real = _real(_join(base, _text(path)))
    except (OSError, TypeError, ValueError):
        return True
    return not (real + "/").startswith(_home) and real != "/dev/null"
def _opd_bench_guard(event, args, _blocked=("socket.", "subprocess.", "os.system", "os.exec", "os.posix_spawn",
                                             "os.spawn", "os.fork", "os.forkpty", "os.kill", "os.killpg",
                                             "ctypes.", "pty.", "sys._current_frames", "sys._settraceallthreads",
                                             "sys._setprofileallthreads", "gc.get_"),
                     _modules=("_posixsubprocess",), _name=_os.path.basename, _text=_os.fsdecode,
                     _writes=_os.O_WRONLY | _os.O_RDWR | _os.O_CREAT | _os.O_TRUNC | _os.O_APPEND,
                     _paths=(("os.remove", 0, 1), ("os.rmdir", 0, 1), ("os.mkdir", 0, 2), ("os.chmod", 0, 2),
                             ("os.chown", 0, 3), ("os.utime", 0, 3), ("shutil.rmtree", 0, 1), ("os.truncate", 0, None),
                             ("os.chflags", 0, None), ("os.setxattr", 0, None), ("os.removexattr", 0, None),
                             ("os.rename", 0, 2), ("os.rename", 1, 3), ("os.link", 0, 2), ("os.link", 1, 3),
                             ("os.symlink", 1, 2)),
                     _outside=_opd_bench_outside, _isdir=_os.path.isdir, _join=_os.path.join, _cwd=_os.getcwd):
    # _posixsubprocess.fork_exec starts a process without an audit event: the module is not imported.
    # A file named `mem` (/proc/<pid>/mem, by any path or from a folder's descriptor) is the memory.
    # Files change only in the program's own folder: written, made, removed, renamed, linked, their mode,
    # owner or times changed (each event's path read from the folder descriptor it names, if any). The
    # open event names none, so no folder elsewhere is opened: its descriptor would lead there.
    if event.startswith(_blocked) or (event == "import" and args and args[0] in _modules):
        refused = True
    elif event == "open" and args and isinstance(args[0], (str, bytes)):
        path, writes = _text(args[0]), len(args) > 2 and isinstance(args[2], int) and args[2] & _writes
        refused = _name(path.rstrip("/")) == "mem" or ((writes or _isdir(_join(_cwd(), path))) and _outside(path))
    elif event == "open" and args and isinstance(args[0], int):
        refused = len(args) > 2 and isinstance(args[2], int) and bool(args[2] & _writes) and _outside(args[0])
    elif event == "sqlite3.connect" and args:  # a database file; a `file:` URI is refused, whatever it names
        database = _text(args[0]) if isinstance(args[0], (str, bytes)) else args[0]
        refused = database not in ("", ":memory:") and (str(database).startswith("file:") or _outside(database))
    else:
        refused = False
        for _event, where, fd_at in _paths:
            if event == _event and len(args) > where:
                fd = args[fd_at] if fd_at is not None and len(args) > fd_at else -1
                if _outside(args[where], fd):
                    refused = True
    if refused:
        what = str(args[0] if args else "")[:100]
        raise PermissionError("not allowed in the OPD-Bench sandbox: " + event + " " + what)
_sys.addaudithook(_opd_bench_guard)
def _opd_bench_keep(handover, ready, done, _read=_sys.stdin.buffer.read, _write=_os.write):
    token, _, source = _read().partition(b"\\n")
    handover.append(source)
    ready.set()
    done.wait()
    _write(1, b"\\n" + token + b"\\n")
def _opd_bench_run():
    handover, ready, done = [], _threading.Event(), _threading.Event()
    keeper = _threading.Thread(target=_opd_bench_keep, args=(handover, ready, done), daemon=True)
    keeper.start()
    ready.wait()
    keeper._target = keeper._args = None  # nothing on the thread's object leads to what it keeps
    _sys.stdin.close()
    _os.close(0)  # sys.stdin leaves its descriptor open: /proc/self/fd/0 would still read the token
    _sys.stdin = open(_os.open(_os.devnull, _os.O_RDONLY), encoding="utf-8", closefd=False)  # fd 0 again: empty
    source = handover.pop()
    _linecache.cache["program.py"] = (len(source), None, source.decode("utf-8", "replace").splitlines(True),
                                      "program.py")  # for tracebacks and inspect.getsource
    program = _types.ModuleType("__main__")
    program.__builtins__, program.__file__ = __builtins__, "program.py"  # a name in linecache, no file
    _sys.modules["__main__"] = program  # pickle finds the program's classes
    exec(compile(source, "program.py", "exec"), vars(program))
    _sys.stdout.flush()
    done.set()
    keeper.join()
del _resource, _limit, _value, _hard, _unaudited, _module, _opd_bench_guard, _opd_bench_outside
_opd_bench_run()
"""


@dataclass(frozen=True)
class SandboxResult:
    """What became of one program.

    Attributes:
        passed: it ran to its end and exited with status 0 within its limits.
        status: `ok`, `failed` (non-zero exit), `killed` (by a signal: memory, CPU or file size),
            `timeout` (wall clock) or `error` (it could not be started).
        returncode: the exit status (negative: the signal), None on timeout or error.
        output: the last `OUTPUT_TAIL_CHARS` characters of its stdout and stderr.
        wall_s: seconds it ran.
    """

    passed: bool
    status: str
    returncode: int | None
    output: str
    wall_s: float


@functools.cache
def has_unshare_net() -> bool:
    """Whether `unshare -rn` works here (Linux, user namespaces allowed)."""
    path = shutil.which("unshare")
    if not sys.platform.startswith("linux") or path is None:
        return False
    try:
        return subprocess.run([path, "-rn", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _runner(memory_mb: int, cpu_s: int) -> str:
    """The child's script: limits (address space, CPU seconds, file size, no core dumps), the audit hook,
    then the program from stdin."""
    memory = memory_mb * (1 << 20)
    limits = [(resource.RLIMIT_AS, memory), (resource.RLIMIT_CPU, cpu_s),
              (resource.RLIMIT_FSIZE, MAX_OUTPUT_BYTES), (resource.RLIMIT_CORE, 0)]
    return _RUNNER.format(limits=[(int(k), int(v)) for k, v in limits])


def run_python(program: str, *, timeout_s: float = TIMEOUT_S, memory_mb: int = MEMORY_MB) -> SandboxResult:
    """Run `program` (Python source) under the limits above; never raises because of the program."""
    import time

    with tempfile.TemporaryDirectory(prefix="opd-sandbox-") as tmp:
        out_path = Path(tmp) / "output.txt"
        token = secrets.token_hex(16)
        try:
            # the token, then the program, on the child's stdin from a file with no name: in no folder
            feed = tempfile.TemporaryFile(dir=tmp)
            feed.write(f"{token}\n{program}\n".encode("utf-8", "surrogatepass"))
            feed.seek(0)
        except (OSError, UnicodeError) as exc:
            return SandboxResult(False, "error", None, f"{type(exc).__name__}: {exc}", 0.0)
        command = [sys.executable, "-I", "-c", _runner(memory_mb, int(timeout_s) + 1)]
        if has_unshare_net():
            command = [shutil.which("unshare") or "unshare", "-rn", *command]
        start = time.monotonic()
        status, code = "ok", None
        try:
            # read back through this same handle: the program owns its folder, and could put a FIFO or a link
            # to an endless file in the place of output.txt
            out = open(out_path, "w+b")
        except OSError as exc:
            return SandboxResult(False, "error", None, f"{type(exc).__name__}: {exc}", 0.0)
        with out, feed:
            try:
                proc = subprocess.Popen(
                    command, cwd=tmp, env={}, stdin=feed, stdout=out, stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
                feed.close()  # the child's stdin is its own copy, which it closes once it has read it
                try:
                    code = proc.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    status = "timeout"
                finally:
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)  # the program and anything it left behind
                    except ProcessLookupError:
                        pass
                    proc.wait()
            except (OSError, subprocess.SubprocessError) as exc:
                return SandboxResult(False, "error", None, f"{type(exc).__name__}: {exc}", time.monotonic() - start)
            wall_s = time.monotonic() - start
            out.seek(max(0, os.fstat(out.fileno()).st_size - 4 * OUTPUT_TAIL_CHARS))
            output = out.read(4 * OUTPUT_TAIL_CHARS).decode("utf-8", "replace")[-OUTPUT_TAIL_CHARS:]
        if status == "ok" and code != 0:
            status = "killed" if code is not None and code < 0 else "failed"
        elif status == "ok" and not output.rstrip().endswith(token):
            status = "failed"  # exited 0 before its end
        return SandboxResult(status == "ok", status, code, output, wall_s)
