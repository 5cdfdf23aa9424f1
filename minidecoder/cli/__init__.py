"""`minidecoder` / `python -m minidecoder`: one sub-command per module in this package.

Each sub-command module defines `add_parser(subparsers)` and `run(args) -> int`. Whatever a command
does, its ending is decided here, once:

- a `MinidecoderError` is printed as a message (problem and fix) with exit status 2, never a traceback;
- Ctrl-C prints one line saying what was kept and how to resume: the `Interrupted` line a command
  raised (a job's chunks, eval's embeddings), else the command's `interrupted` default; status 130;
- a closed stdout (`minidecoder fetch --list | head -1`) ends quietly with status 141, as a Unix
  tool killed by SIGPIPE does (`yes | head` reports 141 in the shell): stdout is pointed at /dev/null
  so that the interpreter's final flush does not print a second error.
"""
from __future__ import annotations

import argparse
import atexit
import contextlib
import errno
import gc
import importlib
import os
import re
import signal
import sys
import threading
import traceback
import warnings
from pathlib import Path

from minidecoder.errors import MinidecoderError

# Order is the order of `--help`.
SUBCOMMANDS = ["demo", "logits", "generate", "fetch", "convert", "embed", "eval", "sweep", "explain"]
BROKEN_PIPE_STATUS = 141  # 128 + SIGPIPE, what the shell reports for a tool the pipe closed on
INTERRUPTED_STATUS = 130  # 128 + SIGINT
TERMINATED_STATUS = 143  # 128 + SIGTERM
NOTHING_KEPT = "interrupted; nothing was kept ({command} writes nothing until it ends); run the same command again"


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose "expected one argument" says the way out when the value given starts with
    '-' (argparse takes `--layers -1,30` for two options; `--layers=-1,30` works)."""

    argv: list[str] = []  # the command line being parsed (set by `main`; subparsers are other instances)

    def error(self, message: str):
        match = re.match(r"argument (?:\S+/)?(--[\w-]+): expected one argument$", message)
        if match:
            flag = match.group(1)
            following = [value for option, value in zip(self.argv, self.argv[1:]) if option == flag]
            if following and following[0].startswith("-"):
                message += (f" ({following[0]!r} starts with '-', so it was read as an option: write "
                            f"{flag}={following[0]})")
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="minidecoder", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMANDS:
        module = importlib.import_module(f"minidecoder.cli.{name}_cmd")
        module.add_parser(subparsers)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command is, as Ctrl-C is: every `finally` runs (locks released and their
    files removed, finished chunks kept and said), where Python's default would end the process at once."""


def _terminate(signum, frame) -> None:
    raise Terminated()


def _started_by_sigterm(interrupt: BaseException) -> bool:
    """Whether a Terminated is in `interrupt`'s chain: a job re-raises the stop as its own Interrupted (the
    line saying what it kept), with the Terminated as its context."""
    from minidecoder.running.command_line import exception_chain

    return any(isinstance(error, Terminated) for error in exception_chain(interrupt))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    _Parser.argv = list(sys.argv[1:] if argv is None else argv)
    args = None
    previous = _catch_sigterm()
    ctrl_c = signal.getsignal(signal.SIGINT)  # what an interrupted run puts back, however often it ignores Ctrl-C
    try:
        args = parser.parse_args(argv)
        python_format, warnings.formatwarning = warnings.formatwarning, _format_warning
        try:
            status = int(args.run(args) or 0)
        finally:
            warnings.formatwarning = python_format
        sys.stdout.flush()  # a closed pipe shows here, inside the handlers, not at interpreter exit
        return status
    except MinidecoderError as error:
        print(f"minidecoder: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as interrupt:  # printed once, here
        said = False
        while True:  # a second Ctrl-C landing before it is ignored raises in here: the first one's line still
            try:
                with _ctrl_c_ignored(ctrl_c):
                    if not said:
                        print(f"minidecoder: {interrupted_line(interrupt, getattr(args, 'command', None))}",
                              file=sys.stderr)
                        said = True
                    _free_the_stopped_command(interrupt)
                break
            except KeyboardInterrupt:
                continue
        atexit.unregister(_ignore_ctrl_c)  # once, however many runs a process makes
        atexit.register(_ignore_ctrl_c)  # run before the finalizers registered earlier (torch's, at import)
        return TERMINATED_STATUS if _started_by_sigterm(interrupt) else INTERRUPTED_STATUS
    except BrokenPipeError:
        return _stdout_closed()
    except OSError as error:
        if error.errno != errno.EPIPE:
            raise
        return _stdout_closed()
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _format_warning(message, category, filename, lineno, line=None) -> str:
    """A warning of minidecoder's own (a UserWarning raised in its package: rows cut by --truncate, a fast path
    turned off) as one line that names the command, not as a source line; any other, a library's included, as
    Python writes it. (The format, not the display: whoever records warnings, a test or a caller, still
    receives them.)"""
    if issubclass(category, UserWarning) and Path(filename).resolve().is_relative_to(PACKAGE):  # not scikit-learn's
        return f"minidecoder: warning: {message}\n"
    return _python_format_warning(message, category, filename, lineno, line)


_python_format_warning = warnings.formatwarning
PACKAGE = Path(__file__).resolve().parent.parent  # minidecoder/: where its own warnings are raised


@contextlib.contextmanager
def _ctrl_c_ignored(restore):
    """Ctrl-C ignored while the interrupted command's line is printed and its objects are freed, then the
    handler `restore` put back (a caller running `main` in its own process keeps its Ctrl-C). Only the main
    thread receives signals, so elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:  # None: a handler installed outside Python, which Python cannot put back
        signal.signal(signal.SIGINT, restore if restore is not None else signal.SIG_DFL)


def _free_the_stopped_command(interrupt: BaseException) -> None:
    """Free what the stopped command's frames hold, now, while Ctrl-C is ignored: else their finalizers (a
    progress bar's `__del__`) run as the handler ends, where a second Ctrl-C prints "Exception ignored ...
    Traceback" over the line just printed."""
    from minidecoder.running.command_line import exception_chain

    for error in exception_chain(interrupt):  # the chain: a job re-raises the stop as its line
        traceback.clear_frames(error.__traceback__)  # skips the frames still running (this one)
    gc.collect()  # what those frames held in reference cycles


def _ignore_ctrl_c() -> None:
    """At exit after a Ctrl-C: the line is printed and the process is ending, so a second Ctrl-C landing in the
    interpreter's finalizers (torch's library cleanup) would only print "Exception ignored ... Traceback"."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _catch_sigterm():
    """Install `_terminate` for SIGTERM where Python's default stands (never over a program's own handler,
    and only in the main thread, where signals are delivered); the handler it replaced, or None."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        return None
    return signal.signal(signal.SIGTERM, _terminate)


def interrupted_line(interrupt: KeyboardInterrupt, command: str | None) -> str:
    """What was kept and how to resume: the command's own `Interrupted` line, else its module's
    `INTERRUPTED`, else NOTHING_KEPT."""
    from minidecoder.running.command_line import first_interrupted

    kept = first_interrupted(interrupt)  # a second Ctrl-C on the way up keeps the first one's line
    if kept is not None:
        return str(kept)
    if command not in SUBCOMMANDS:
        return "interrupted while reading the command line; nothing was done"
    module = importlib.import_module(f"minidecoder.cli.{command}_cmd")
    return getattr(module, "INTERRUPTED", NOTHING_KEPT.format(command=command))


def _stdout_closed() -> int:
    """The reader of stdout went away: stop quietly, as `yes | head -1` does."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the interpreter's last flush now goes nowhere
        os.close(devnull)
    except (OSError, ValueError):  # stdout has no file descriptor (captured): nothing to redirect
        pass
    return BROKEN_PIPE_STATUS
