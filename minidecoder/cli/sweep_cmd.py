"""`minidecoder sweep`: choose a method's hyper-parameters on STS-B dev (never a test split).

    minidecoder sweep --model smollm2-135m-instruct --method prompteol --layers all --plot
    minidecoder sweep --method tp --opt prompt=pretended_cot --layers 20,25,-2,-1 --tp-end 2,3,4,5,6,7
    minidecoder sweep --method cp --cp-steer 3,4,5,6,7 --cp-alpha 0.25,0.5,1,2 --layers=-2,-1 --limit 200

One forward pass yields every output layer; TP's end layers fork one copying forward; CP's auxiliary
pass and unsteered trunk are shared by every steer layer and alpha (minidecoder.evaluation.sweep).
The report gives every grid point's dev score, the best point, and the blocks computed against
separate runs of each point. `--layers all` is 1..L (L = the final normed output); values are
hidden_states indices, negatives counting from the end. Writes PREFIX.json and PREFIX.md (and
PREFIX-<axis>.png with --plot, which needs matplotlib: `pip install minidecoder[plots]`), each locked
from before the model loads until it is written, and none replaced without --overwrite.

Every finished batch (each grid point's vectors of its sentences, and its counts) is kept in
`.PREFIX.json.partial/` beside the report, bound to the model's files, dtype, device, method, grid,
data, --limit, --batch-size and code: Ctrl-C or a kill keeps them, and the same command (same --output)
computes only the rest, to the same scores as an uninterrupted run; a run with other settings is refused,
naming what differs. The cost counts every batch, those of an earlier run included (the report's
`resumed_batches` says how many). The folder is removed once every output is written.
"""
from __future__ import annotations

import argparse
import shlex
import shutil
from pathlib import Path

from minidecoder.running.command_line import (add_model_options, add_output_options, argv_of, build_cli_method,
                                             check_integers, check_sizes, claim_cli_outputs, default_prefix,
                                             load_model, model_stamp, parse_options, resume_settings)
from minidecoder.errors import InputError, Interrupted, OutputError

# Ctrl-C before the sweep's first batch started (_sweep says more once it has)
SWEEP_FLAGS = ("model", "method", "layers", "tp_end", "cp_steer", "cp_alpha", "data", "limit", "dtype", "device",
               "batch_size")  # the stamp's command line, in this order
# the flags that choose what a kept batch holds (the texts and the grid), recorded with the kept work so that a
# resume with another value is refused by its flag before the model loads
INPUT_FLAGS = ("--data", "--limit", "--layers", "--tp-end", "--cp-steer", "--cp-alpha", "--grid")
OWNER = "minidecoder sweep"  # of the kept-work folder `.PREFIX.json.partial/` (running.jobs.owned_work_folder)
INTERRUPTED = ("interrupted before any batch of the sweep was computed; nothing new was kept; run the same command "
               "again (with the same --output, it resumes from batches an earlier run kept)")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("sweep", help="choose hyper-parameters on STS-B dev (layers, TP end, CP steer/alpha)",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--method", required=True, help="method name, e.g. prompteol, tp, cp, mean")
    parser.add_argument("--opt", action="append", default=[], metavar="KEY=VALUE",
                        help="a fixed method option (JSON when it parses); repeat for more")
    parser.add_argument("--layers", default=None, metavar="all|A,B,C", help="output layers to sweep (option `layer`)")
    parser.add_argument("--tp-end", default=None, metavar="E1,E2", help="TP end layers to sweep (option `end`)")
    parser.add_argument("--cp-steer", default=None, metavar="L1,L2", help="CP steer layers (option `steer_layer`)")
    parser.add_argument("--cp-alpha", default=None, metavar="A1,A2", help="CP alphas (option `alpha`)")
    parser.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                        help="any other option to sweep (points share every block their steps compute alike)")
    parser.add_argument("--data", default=None, metavar="DIR", help="STS data folder (default: $MINIDECODER_STS_DATA or ../shared/data/sts)")
    parser.add_argument("--limit", type=int, default=None, metavar="N", help="score only the first N dev pairs")
    parser.add_argument("--batch-size", type=int, default=32, help="sentences per forward pass (default 32)")
    parser.add_argument("--output", default=None, metavar="PREFIX", help="write PREFIX.json, PREFIX.md (a PREFIX ending in .json or .md names that file; default: ./sweep-MODEL-METHOD-DATE)")
    parser.add_argument("--plot", action="store_true", help="also write PREFIX-<axis>.png (needs matplotlib)")
    add_output_options(parser, "PREFIX.json / PREFIX.md / PREFIX-<axis>.png")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    add_model_options(parser)
    parser.set_defaults(run=run)


AXIS_FLAGS = (("layers", "layer"), ("tp_end", "end"), ("cp_steer", "steer_layer"), ("cp_alpha", "alpha"))  # (flag, option)


def check_axes(args: argparse.Namespace) -> None:
    """Every swept option (--layers, --tp-end, --cp-steer, --cp-alpha, --grid KEY) is an option of the method
    (else the sweep would answer with unrelated rules, after the model loaded), its integer values fit in 64
    bits, and it gives no value twice."""
    import dataclasses

    import minidecoder.methods
    from minidecoder.evaluation.sweep import parse_values

    texts = axis_texts(args)
    for key, raw in texts.items():
        values = parse_values(raw)
        for value in values:
            check_integers(_flag(args, key), key, value)
        twice = [value for i, value in enumerate(values) if value in values[:i]]
        if twice and not _from_layers(args, key):  # --layers is read as a set of layers
            raise InputError(f"{_as_given(args, key, raw)} gives {key}={twice[0]!r} twice: the point would be computed "
                             "twice and counted twice in the saving", "give each value once")
    cls = minidecoder.methods.METHODS.get(args.method)
    if cls is None or not dataclasses.is_dataclass(cls):
        return
    known = [field.name for field in dataclasses.fields(cls)]
    for key, raw in texts.items():
        if key not in known:
            swept = "" if _flag(args, key) == "--grid" else f" sweeps the option {key!r}, and"
            raise InputError(f"{_as_given(args, key, raw)}{swept}: method {args.method} has no option {key!r}",
                             f"its options are {', '.join(known)} (`minidecoder embed --help` describes them)")


def _flag(args: argparse.Namespace, key: str) -> str:
    """The flag that sweeps option `key`: --layers, --tp-end, --cp-steer, --cp-alpha or --grid."""
    for flag, name in AXIS_FLAGS:
        if name == key and getattr(args, flag) is not None:
            return "--" + flag.replace("_", "-")
    return "--grid"


def _as_given(args: argparse.Namespace, key: str, raw: str) -> str:
    """The flag and values that sweep option `key`, as typed: `--grid KEY=V1,V2` or `--tp-end V1,V2`."""
    flag = _flag(args, key)
    return f"--grid {key}={raw}" if flag == "--grid" else f"{flag} {raw}"


def axis_texts(args: argparse.Namespace) -> dict[str, str]:
    """Each swept option and its values as given (--layers, --tp-end, --cp-steer, --cp-alpha, --grid KEY=V1,V2),
    checked: every --grid is KEY=..., no option is swept twice, something is swept."""
    texts: dict[str, str] = {}
    for flag, name in AXIS_FLAGS:
        if getattr(args, flag) is not None:
            texts[name] = getattr(args, flag)
    for pair in args.grid:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--grid {pair!r} is not KEY=V1,V2", "write e.g. --grid num_pst=1,2,3")
        if key.strip() in texts:
            raise InputError(f"option {key.strip()!r} is swept twice", "give each axis once")
        texts[key.strip()] = raw
    if not texts:
        raise InputError("nothing to sweep", "give --layers, --tp-end, --cp-steer, --cp-alpha or --grid KEY=V1,V2")
    return texts


def build_axes(args: argparse.Namespace, num_layers: int) -> dict[str, list]:
    from minidecoder.evaluation.sweep import layer_axis, parse_values

    return {name: layer_axis(text, num_layers) if _from_layers(args, name) else parse_values(text)
            for name, text in axis_texts(args).items()}


def _from_layers(args: argparse.Namespace, name: str) -> bool:
    """The axis is --layers (read by `layer_axis`; a --grid layer=... is taken as given)."""
    return name == "layer" and args.layers is not None


def figure_paths(args: argparse.Namespace, prefix: Path) -> list[Path]:
    """The PREFIX-<axis>.png that --plot will write, known before the model loads (`--layers all` counts as
    several layers), so that they are claimed with the report. --plot on a sweep whose every axis has one
    value is refused: it would draw nothing (a curve needs two or more points)."""
    from minidecoder.evaluation.report import sweep_figure_paths
    from minidecoder.evaluation.report import report_paths
    from minidecoder.evaluation.sweep import parse_values

    if not args.plot:
        return []
    counts = {}
    for name, text in axis_texts(args).items():
        if _from_layers(args, name):  # layer_axis drops repeats
            counts[name] = 2 if text.strip() == "all" else len(set(map(repr, parse_values(text))))
        else:
            counts[name] = len(parse_values(text))
    refuse_plot_of_points(args, counts)
    return list(sweep_figure_paths(report_paths(prefix)[0].with_suffix(""), counts).values())


def refuse_plot_of_points(args: argparse.Namespace, counts: dict[str, int]) -> None:
    """--plot with no axis of two or more values (option -> number of values) is an InputError: PREFIX-<axis>.png
    is drawn for each axis with several values (one curve of score against it), so there would be no figure."""
    if not args.plot or any(count > 1 for count in counts.values()):
        return
    texts = axis_texts(args)
    given = ", ".join(_as_given(args, name, texts[name]) for name in counts)
    raise InputError(f"--plot draws the dev score against each swept option with two or more values, but this sweep "
                     f"has one value per option ({given}), so there is no curve to draw (a curve needs two or "
                     "more points)", "drop --plot, or sweep two or more values, e.g. --layers 2,3")


def run(args: argparse.Namespace) -> int:
    from minidecoder.evaluation.report import check_report_prefix, report_paths, work_folder
    from minidecoder.evaluation.sts import load_tasks, refuse_empty_sentences
    from minidecoder.running.jobs import check_work_owner

    check_sizes(args, limit_example=200)
    method = build_cli_method(args.method, args.opt)
    check_axes(args)  # before the model loads
    prefix = Path(args.output) if args.output else default_prefix("sweep", args.model, args.method)
    figures = figure_paths(args, prefix)  # --plot of a sweep with nothing to draw refused here
    check_report_prefix(prefix, args.overwrite)  # before the model loads and the long run starts
    check_work_owner(work_folder(prefix), OWNER, resume_settings(args, INPUT_FLAGS))  # never taken over; by flag
    (dev,) = load_tasks(["STSBenchmark-dev"], args.data, args.limit)  # read and checked (a gold score "abc")
    refuse_empty_sentences([dev], method)
    if figures:
        from minidecoder.running.figures import check_figure_path
        check_figure_path(figures[0])  # matplotlib installed: found out now, not after the sweep
    with claim_cli_outputs(args, [*report_paths(prefix), *figures]):  # held until the last write
        return _sweep(args, method, prefix, dev)


def _sweep(args: argparse.Namespace, method, prefix: Path, dev) -> int:
    from minidecoder.evaluation.report import work_folder, write_or_rescue
    from minidecoder.evaluation.sweep import sweep_sts
    from minidecoder.evaluation.sweep import sweep_markdown, write_sweep_report
    from minidecoder.output_files import whole_or_absent
    from minidecoder.running.jobs import JobInterrupted, owned_work_folder

    from minidecoder.running.embedding import check_texts_fit
    from minidecoder.evaluation.sts import unique_sentences

    fixed = set(parse_options(args.opt))
    model = load_model(args)
    check_texts_fit(model, method, unique_sentences([dev]), lambda row: "an STS sentence", truncate_flag=None)
    axes = build_axes(args, model.num_layers)
    refuse_plot_of_points(args, {name: len(values) for name, values in axes.items()})  # --layers 2,-1 of 2 layers
    clash = sorted(fixed & set(axes))
    if clash:
        raise InputError(f"option(s) {clash} are both fixed (--opt) and swept", "drop one of the two")
    work = work_folder(prefix)
    again = "run the same command again" + ("" if args.output else f" with --output {prefix}")
    metadata = {
        **model_stamp(args, model, method),
        "swept": axes,
        "tasks": ["STSBenchmark-dev"],
        "command": shlex.join(["minidecoder", "sweep", *argv_of(args, SWEEP_FLAGS)]),
    }
    try:
        with owned_work_folder(work, OWNER, f"{metadata['command']} --output {shlex.quote(str(prefix))}",
                               resume_settings(args, INPUT_FLAGS)):
            result = sweep_sts(model, method, axes, batch_size=args.batch_size, progress=not args.no_progress,
                               dev=dev, work=work)
    except JobInterrupted as stop:
        if stop.saved == 0:
            raise Interrupted(f"interrupted before the first batch of the sweep was finished; nothing was kept; "
                              f"{again}") from None
        raise Interrupted(f"interrupted; {stop.saved} of {stop.chunks} batches of the sweep are kept in {work}; "
                          f"{again} to resume from them") from None
    cost = result.cost
    kept = f"all {cost['batches']} batches of the sweep are kept in {work}"
    try:  # the batches stay until every output is written: a failed or interrupted write loses no work
        with whole_or_absent(args.overwrite) as written:  # a failed figure takes the report back
            written += write_or_rescue(lambda where: write_sweep_report(where, result, metadata, args.overwrite),
                                       prefix, sweep_markdown(result, {}))
            if args.plot:
                from minidecoder.evaluation.report import plot_sweep
                written += plot_sweep(result.to_dict(), written[0].with_suffix(""),  # r.json -> r-<axis>.png
                                      metadata["model"], overwrite=args.overwrite)
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted while writing the sweep's outputs; {kept}; {again} (with --overwrite for "
                          f"any of them already written) to write them without recomputing") from None
    except OutputError as error:
        fix = (error.fix or "fix the output folder, then run the same command again").replace(
            "run the same command again", again)
        raise OutputError(f"{error.problem}; {kept}", f"{fix}: it writes the outputs from them without recomputing "
                          f"(delete {work} to discard them)") from None
    shutil.rmtree(work, ignore_errors=True)
    best = result.best
    print(f"best on STS-B dev: {best['options']} -> {best['score']:.2f}" if best else "no finite dev score")
    resumed = (f"; {cost['resumed_batches']} of {cost['batches']} batches computed by an earlier run, which the "
               "counts include" if cost["resumed_batches"] else "")
    print(f"rows x blocks computed: {cost['blocks_computed']:,} (separate runs: {cost['blocks_naive']:,}; "
          f"rule: {result.rule}{resumed})")
    print("wrote " + ", ".join(str(p) for p in written))
    return 0


