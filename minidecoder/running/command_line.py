"""Options and checks every command shares (the sub-commands, and the benchmark families' own commands in
minidecoder.evaluation): the model, method options, sizes, and the outputs (claimed through
minidecoder.output_files before the model loads)."""
from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from minidecoder.errors import InputError, Interrupted
from minidecoder.sources.registry import DEFAULT_MODEL

# --opt integers must fit in 64 bits (torch's seeds and int64 tensors): a larger one failed deep in the
# method after the model had loaded.
INT_RANGE = (-2**63, 2**64 - 1)
# The model's switches (`add_model_options`): each changes how the vectors are computed, so a rerun needs it
MODEL_SWITCHES = ("compile", "pack_weights", "graphs")


def add_model_options(parser: argparse.ArgumentParser, switches: tuple[str, ...] = MODEL_SWITCHES) -> None:
    """--model, --dtype, --device, --ignore-config-key, and the fast-path `switches` that act on this command's
    runs: `--compile` and `--graphs` speed the method loop alone, so a command that runs only logits or
    generation (or only explain's recorded passes, which take no graphs) does not offer them."""
    parser.add_argument("--model", default=None,
                        help="a known model name (see `minidecoder fetch --list`), a checkpoint folder, or a "
                             "Hub id; default: smollm2-135m-instruct, fetched and converted on first use")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, mps")
    if "compile" in switches:
        parser.add_argument("--compile", action="store_true",
                            help="fuse each block's elementwise work with torch.compile: the first batch "
                                 "compiles (tens of seconds with an empty inductor cache, a few with a warm one: "
                                 "docs/benchmarks.md gives the times it measured and the gain); calls through the "
                                 "prompt methods' prefix cache run plain; needs a C++ compiler on CPU")
    if "pack_weights" in switches:
        parser.add_argument("--pack-weights", action="store_true",
                            help="CPU only: reorder the block weights once into oneDNN's layout (8-13%% faster "
                                 "on an EPYC, no gain on an AMX Xeon: docs/benchmarks.md; a second copy of them in "
                                 "memory)" + ("; combines with --compile" if "compile" in switches else ""))
    if "graphs" in switches:
        parser.add_argument("--graphs", action="store_true",
                            help="replay small block calls (a few hundred tokens) from captured CUDA graphs, "
                                 "batches padded to a bounded set of shapes; off by default: at token-budget batch "
                                 "sizes the padding costs more than graphs save (docs/reliability.md)")
    parser.add_argument("--ignore-config-key", action="append", default=[], metavar="KEY",
                        help="a config.json key you know does not change numerics (unknown keys are errors); "
                             "repeat for more")


def add_output_options(parser: argparse.ArgumentParser, replaces: str) -> None:
    """--overwrite and --wait, for a command whose outputs go through `claim_cli_outputs`."""
    parser.add_argument("--overwrite", action="store_true", help=f"replace {replaces} if it exists")
    parser.add_argument("--wait", action="store_true",
                        help="if another run is writing the same output, wait for it (default: refuse, naming it)")


@contextlib.contextmanager
def claim_cli_outputs(args: argparse.Namespace, paths: list[Path], inputs: list[Path] = ()) -> Iterator[Any]:
    """`output_files.claim_outputs` with the command's --overwrite / --wait: take it before the model loads
    and hold it until the final write. `inputs`: the files the command reads, never one of `paths`."""
    from minidecoder.output_files import claim_outputs

    with claim_outputs(paths, overwrite=getattr(args, "overwrite", False), wait=getattr(args, "wait", False),
                       inputs=inputs) as claim:
        yield claim


def check_sizes(args: argparse.Namespace, limit_example: int = 50) -> None:
    """--batch-size, --limit and --truncate, where the command has them, are positive; checked before anything
    loads."""
    if getattr(args, "batch_size", None) is not None and args.batch_size < 1:
        raise InputError(f"--batch-size {args.batch_size} must be at least 1", "e.g. --batch-size 32")
    if getattr(args, "limit", None) is not None and args.limit < 1:
        raise InputError(f"--limit {args.limit} must be at least 1", f"e.g. --limit {limit_example}")
    if getattr(args, "truncate", None) is not None and args.truncate < 1:
        raise InputError(f"--truncate {args.truncate} must be a positive number of tokens",
                         "e.g. --truncate 512 keeps the first 512 tokens of each text")


def check_integers(flag: str, key: str, value: Any) -> None:
    """Every integer inside an option value (lists and objects included) fits in 64 bits."""
    if isinstance(value, bool):
        return
    if isinstance(value, int) and not INT_RANGE[0] <= value <= INT_RANGE[1]:
        raise InputError(f"{flag} {key}={value} is past 64 bits (integers run from -2**63 to 2**64-1)",
                         f"give a smaller number, e.g. {flag} {key}=0")
    for item in value.values() if isinstance(value, dict) else value if isinstance(value, list) else ():
        check_integers(flag, key, item)


def load_model(args: argparse.Namespace):
    from minidecoder.running import load_model as loading  # looked up at the call: tests patch loading.load
    extra = {"ignore_config_keys": tuple(args.ignore_config_key)} if getattr(args, "ignore_config_key", None) else {}
    switches = {name: getattr(args, name, False) for name in MODEL_SWITCHES}  # those the command offers
    return loading.load(args.model, dtype=args.dtype, device=args.device, **switches, **extra)


def build_cli_method(name: str, pairs: list[str]):
    """The method `name` with `--opt` pairs, each value checked against the option's type first, so that
    `--opt prompt=true` is named as a boolean given to a text option rather than failing inside the method."""
    import minidecoder.methods
    from minidecoder.methods.base import mistyped_options

    options = parse_options(pairs)
    cls = minidecoder.methods.METHODS.get(name) if isinstance(name, str) else None
    for key, value, default in mistyped_options(cls, options) if cls is not None else []:
        expected = type(default)
        raise InputError(
            f"--opt {key}={_raw(pairs, key)} gives {_kind(value)}, but {name}'s option {key} takes "
            f"{_kind(default)} (default {json.dumps(default)})",
            f"e.g. --opt {key}={default if expected is not bool else str(default).lower()}"
            + ("; a text that looks like JSON is quoted: --opt " + key + "='\"" + _raw(pairs, key) + "\"'"
               if expected is str else ""))
    return minidecoder.methods.build_method(name, **options)


def _raw(pairs: list[str], key: str) -> str:
    for pair in pairs:
        k, _, raw = pair.partition("=")
        if k.strip() == key:
            return raw
    return ""


# what a parsed option value is, in words (bool before int: True is an int too)
KINDS = ((bool, "a boolean"), (int, "an integer"), (float, "a number"), (str, "a text"), (list, "a list"),
         (dict, "an object"), (type(None), "null"))


def _kind(value: Any) -> str:
    return next((words for kind, words in KINDS if isinstance(value, kind)), type(value).__name__)


def parse_options(pairs: list[str]) -> dict[str, Any]:
    """`["alpha=0.5", "prompt=cot"]` -> `{"alpha": 0.5, "prompt": "cot"}` (JSON when it parses)."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise InputError(f"--opt {pair!r} is not KEY=VALUE", "write e.g. --opt alpha=0.5 or --opt prompt=cot")
        if key in options:
            raise InputError(f"--opt {key} is given twice", "give each option once")
        try:
            options[key] = json.loads(raw)
        except json.JSONDecodeError:
            options[key] = raw
        except ValueError:  # an integer of thousands of digits: Python refuses to parse it
            raise InputError(f"--opt {key}={raw[:20]}... is past 64 bits (integers run from -2**63 to 2**64-1)",
                             f"give a smaller number, e.g. --opt {key}=0") from None
        check_integers("--opt", key, options[key])
    return options


# The flags that make a kept job's vectors (its manifest checks each again, after the model loads): a resume
# with another value of any of them is refused before the model loads, every difference named by its flag.
EMBEDDING_FLAGS = ("--model", "--method", "--opt", "--dtype", "--device", "--batch-size", "--truncate", "--compile",
                   "--pack-weights", "--graphs")


def resume_settings(args: argparse.Namespace, input_flags: tuple[str, ...] | list[str] = ()) -> dict[str, Any]:
    """{flag: value} a kept-work folder is owned with (`running.jobs.check_work_owner`): the flags that choose
    the texts (`input_flags`) and those that make their vectors, where the command has them."""
    return {flag: getattr(args, flag[2:].replace("-", "_")) for flag in (*input_flags, *EMBEDDING_FLAGS)
            if hasattr(args, flag[2:].replace("-", "_"))}


def model_stamp(args: argparse.Namespace, model, method) -> dict:
    """The stamp's model and method part, as every eval command and the sweep write it."""
    return {
        "model": args.model if args.model is not None else DEFAULT_MODEL,  # what load(None) loads
        "model_source": str(getattr(model, "source", args.model)),
        "dtype": args.dtype,
        "device": args.device,
        "method": method.describe(),
        "batch_size": args.batch_size,
        "tokenizer_sha256": model.tokenizer.checksum,
    }


def exception_chain(error: BaseException | None) -> Iterator[BaseException]:
    """`error`, then each exception it was raised while handling (`__context__`), once each."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__context__


def first_interrupted(interrupt: BaseException | None) -> Interrupted | None:
    """The `Interrupted` (the line saying what was kept) in `interrupt`'s chain: a second Ctrl-C that lands
    while the first one's line is on its way up (in an `except` or a `finally` it passes) is a plain
    KeyboardInterrupt whose context holds that line, and the line must still be the one printed."""
    return next((error for error in exception_chain(interrupt) if isinstance(error, Interrupted) and str(error)),
                None)


EVAL_FLAGS = ("model", "method", "tasks", "sets", "split", "data", "limit", "corpus_limit", "lengths", "instruction",
              "instruction_placement", "blank_lines", "truncate", "dtype", "device", "batch_size")  # eval's, in order
REPEATED_FLAGS = ("opt", "query_opt", "grid", "ignore_config_key")  # given once per value


def argv_of(args: argparse.Namespace, flags: tuple[str, ...] = EVAL_FLAGS) -> list[str]:
    """The options as given (`flags` that are set, the model's switches that are on, then every value of a
    repeated flag: --opt, --query-opt, --grid, --ignore-config-key), for the stamp: the command line that made
    a report, re-runnable (tests/cli/test_recorded_command.py parses it back)."""
    out = []
    for name in flags:
        value = getattr(args, name, None)
        if value is not None:
            out += ["--" + name.replace("_", "-"), str(value)]
    out += ["--" + name.replace("_", "-") for name in MODEL_SWITCHES if getattr(args, name, False)]
    for flag in REPEATED_FLAGS:
        for value in getattr(args, flag, None) or []:
            out += ["--" + flag.replace("_", "-"), value]
    return out


def default_prefix(benchmark: str, model: str | None, method: str) -> Path:
    """./BENCHMARK-MODEL-METHOD-DATE, the report prefix when --output is not given."""
    stem = Path(model).name if model else "default-model"
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path(re.sub(r"[^A-Za-z0-9._-]+", "_", f"{benchmark}-{stem}-{method}-{stamp}"))
