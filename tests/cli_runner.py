"""minidecoder's command line run in process, for the CLI tests."""
from __future__ import annotations

from minidecoder.cli import main


def cli(capsys, *argv: str) -> tuple[int, str]:
    """minidecoder's own entry point in process: (exit status, stderr). argparse's own errors exit 2 too."""
    try:
        code = main(list(argv))
    except SystemExit as stop:
        code = stop.code
    return code, capsys.readouterr().err
