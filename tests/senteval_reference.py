"""The reference's SentEval batcher lines (an oracle the tests compare `senteval_sentence` with) and the
texts whose edge cases they exercise."""
from __future__ import annotations

# No final '.', a final '?', a final '"', inner quotes; lengths vary so that a batch is really padded.
EDGE_TEXTS = [
    "a man is playing a flute",
    "is it raining ?",
    'he said "yes"',
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "ok",
]


def reference_batcher_step(s: str) -> str:
    """The four lines of the PromptEOL / TP batcher, verbatim (kongds/scaling_sentemb evaluation.py)."""
    if len(s) > 0 and s[-1] not in '.?"\'':
        s += "."
    s = s.replace('"', "'")
    if len(s) > 0 and "?" == s[-1]:
        s = s[:-1] + "."
    return s
