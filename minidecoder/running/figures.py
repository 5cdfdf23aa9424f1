"""matplotlib, imported only when a figure is drawn, with the Agg backend (no display needed): the one
place that imports it (the sweeps' figures and the audit view's). It is the optional `plots` extra."""
from __future__ import annotations

from pathlib import Path

from minidecoder.errors import MinidecoderError, OutputError


def pyplot():
    try:
        import matplotlib
    except ImportError:
        raise MinidecoderError("plots need matplotlib, which is not installed",
                               "pip install 'minidecoder[plots]' (or pip install matplotlib), or drop --plot") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def check_figure_path(path: str | Path, flag: str = "--plot") -> None:
    """Before any work: matplotlib is installed and writes the format `path`'s suffix names."""
    from matplotlib.backend_bases import FigureCanvasBase

    pyplot()
    path = Path(path)
    formats = FigureCanvasBase.get_supported_filetypes()
    if path.suffix.lower().lstrip(".") not in formats:
        raise MinidecoderError(f"{flag} {path}: matplotlib cannot write a {path.suffix or 'suffix-less'} figure",
                               f"name it FILE.png (or one of .{', .'.join(sorted(formats))})")


def save_figure(fig, path: str | Path, overwrite: bool = False) -> Path:
    """`fig` written to `path` through minidecoder.output_files (whole, locked, replaced only with
    `overwrite`), in the format its suffix names."""
    from minidecoder.output_files import check_free, write_failure, write_file

    path = Path(path)
    # named before the write, as they are: past this point a file there all along would be reported as one that
    # "appeared while this run was working", a folder likewise, and an unknown suffix as matplotlib's ValueError
    if path.suffix:
        check_figure_path(path, "figure")
    check_free(path, overwrite, "figure")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return write_file(path, lambda tmp: fig.savefig(tmp, format=path.suffix.lower().lstrip(".") or "png"),
                          overwrite)
    except OSError as error:  # a full disk, a folder made at its name meanwhile: the command says what is kept
        cause, way_out = write_failure(error, path)
        raise OutputError(f"writing the figure {path} failed: {cause}", f"{way_out}, then run the same command "
                          "again") from None
