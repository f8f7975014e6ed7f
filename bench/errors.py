"""Every error the engine raises for bad input, a bad run directory or a damaged shipped file: one line
that says what is wrong.

The command line catches `USER_ERRORS` and prints the message with exit status 2; anything else is
a bug and keeps its traceback. Unknown names (methods, suites, profiles, config keys, executors)
get the list of known ones and a "did you mean" (`unknown`).
"""

from __future__ import annotations

import difflib
import errno


class RunError(RuntimeError):
    """A run cannot start or continue; the message says why and what to do."""


class AdapterError(TypeError):
    """A method class does not satisfy the adapter protocol, or a plugin fails to load."""


class CorruptRunError(RuntimeError):
    """A run directory's files cannot be read back."""


class ConfigError(ValueError):
    """A method's setting that does not fit the run's suite or world (a domain the suite lacks, a teacher
    the world has not prepared): the user's input, found when the method starts."""


class UnknownNameError(ValueError):
    """An unknown method / suite / profile name: the message lists what is allowed."""


class UnknownModelError(ValueError):
    """Neither a tiny model spec nor a local Hugging Face model folder."""

    def __init__(self, name: str, known: list[str], missing_path: bool = False, hub_cache: str | None = None) -> None:
        what = "no model folder with a config.json at" if missing_path else "unknown model"
        msg = f"{what} {name!r}"
        if hub_cache is not None:  # it was looked up as a hub id too
            msg += (f", nor a model {name!r} in the local Hugging Face cache {hub_cache} (nothing is downloaded: "
                    f"fetch it first where there is a network, e.g. `hf download {name}`)")
        msg += f"; use a local Hugging Face model folder, a cached hub id, or one of: {', '.join(known)}"
        super().__init__(msg + did_you_mean(name, known))


class UnsupportedModelError(ValueError):
    """The config's architecture has no analytic FLOP formula here, so the ledger cannot meter the model."""


class ReferenceError(RuntimeError):  # noqa: A001  (shadows the builtin only inside `bench`)
    """Shipped reference files that do not match their manifest."""


USER_ERRORS: tuple[type[BaseException], ...] = (
    AdapterError, ConfigError, CorruptRunError, ReferenceError, UnknownModelError, UnknownNameError,
    UnsupportedModelError, RunError,
)


def did_you_mean(name: str, known: list[str]) -> str:
    """` (did you mean 'x'?)` for the closest known name, or "" when none is close."""
    hint = difflib.get_close_matches(name, known, n=1)
    return f" (did you mean {hint[0]!r}?)" if hint else ""


def unknown(kind: str, name: str, known: list[str], most: int | None = None) -> UnknownNameError:
    """`unknown <kind> 'name'; known <kind>s: ...` with a did-you-mean, as an error to raise. With `most`,
    more known names than that are not listed: the closest `most` are offered, and how many there are said
    (lm-eval knows thousands of tasks)."""
    if most is not None and len(known) > most:
        close = [repr(n) for n in difflib.get_close_matches(name, known, n=most)]
        said = f"{', '.join(close[:-1])} or {close[-1]}" if len(close) > 1 else "".join(close)
        hint = f" (did you mean {said}?)" if close else ""
        return UnknownNameError(f"unknown {kind} {name!r}{hint}; {len(known)} {kind}s are known here")
    return UnknownNameError(f"unknown {kind} {name!r}; known {kind}s: {', '.join(sorted(known))}"
                            + did_you_mean(name, known))


def no_space(exc: BaseException) -> bool:
    """Whether an error from writing a file means the disk is full (torch says so only in words)."""
    text = str(exc)
    # torch's zip writer reports a short write as "unexpected pos N vs M" or "file write failed"
    return getattr(exc, "errno", None) in (errno.ENOSPC, errno.EDQUOT) or any(
        words in text for words in ("No space left", "write failed", "unexpected pos"))


def os_error_message(exc: OSError) -> str:
    """One line for a file the command cannot read or write: which file, why, and (disk full) what to do."""
    where = f" {exc.filename}" if exc.filename else ""
    if no_space(exc):
        return f"no space left on device writing{where}: free disk space and run the command again"
    return f"cannot use{where}: {exc.strerror or exc}"
