"""matplotlib, imported only when a figure is drawn, with the Agg backend (no display needed): the one
place that imports it (the sweeps' figures and the audit view's). It is the optional `plots` extra."""
from __future__ import annotations

from minidecoder.errors import MinidecoderError


def pyplot():
    try:
        import matplotlib
    except ImportError:
        raise MinidecoderError("plots need matplotlib, which is not installed",
                               "pip install 'minidecoder[plots]' (or pip install matplotlib), or drop --plot") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt
