"""The command a report, a sweep or an embedding's metadata records is the command that made it: parsed back,
it gives every option that shapes the numbers the value it had. A flag left out of the record (transfer's
--blank-lines, --pack-weights, --ignore-config-key) made a "re-runnable" command that fails or computes
something else."""
from __future__ import annotations

import argparse

import pytest

from minidecoder.cli import build_parser
from minidecoder.cli.embed_cmd import EMBED_FLAGS
from minidecoder.cli.sweep_cmd import SWEEP_FLAGS
from minidecoder.running.command_line import EVAL_FLAGS, argv_of

# Options that choose where the outputs go or how the run looks, not what is computed; an eval command's
# --output is added to its owner record apart, and the probes' worker count changes no probe.
NOT_RECORDED = {"help", "overwrite", "wait", "no_progress", "plot", "probe_workers", "json"}


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return action.choices


def _commands() -> list[tuple[str, argparse.ArgumentParser, tuple[str, ...], set[str]]]:
    commands = _subparsers(build_parser())
    out = [("embed", commands["embed"], EMBED_FLAGS, set()), ("sweep", commands["sweep"], SWEEP_FLAGS, {"output"})]
    out += [(f"eval {name}", parser, EVAL_FLAGS, {"output"}) for name, parser in _subparsers(commands["eval"]).items()]
    return out


def _every_option_set(parser: argparse.ArgumentParser) -> list[str]:
    """A command line giving every option a value other than its default (a space in each string)."""
    argv = []
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        flag = max(action.option_strings, key=len)
        if isinstance(action, argparse._StoreTrueAction):
            argv.append(flag)
        elif action.choices:
            argv += [flag, next(c for c in action.choices if c != action.default)]
        elif action.type is int:
            argv += [flag, "7"]
        elif isinstance(action, argparse._AppendAction):
            argv += [flag, "key=a value", flag, "other=2"]
        else:
            argv += [flag, "a value"]
    return argv


@pytest.mark.parametrize("name, parser, flags, apart", _commands(), ids=[c[0] for c in _commands()])
def test_the_recorded_command_parses_back_to_every_option(name, parser, flags, apart) -> None:
    args = parser.parse_args(_every_option_set(parser))
    again = parser.parse_args(argv_of(args, flags) + [a for flag in apart for a in (f"--{flag}", "x")])
    differ = {dest: (value, getattr(again, dest)) for dest, value in vars(args).items()
              if dest not in NOT_RECORDED | apart and getattr(again, dest) != value}
    assert not differ, f"minidecoder {name}: the recorded command loses {differ}"


def test_the_check_sees_a_flag_left_out() -> None:
    """The round trip fails when a flag that shapes the numbers is not recorded (transfer's --blank-lines was)."""
    parser = _subparsers(_subparsers(build_parser())["eval"])["transfer"]
    args = parser.parse_args(_every_option_set(parser))
    again = parser.parse_args(argv_of(args, tuple(f for f in EVAL_FLAGS if f != "blank_lines")))
    assert again.blank_lines != args.blank_lines
