"""Time HTP's sentence splitter (pysbd, minidecoder/methods/text.py) on BEIR documents: the host-side work HTP
does before its batches, which a GPU does not shrink (docs/benchmarks.md, "Long documents").

    python tools/time_splitter.py                 # every 20th document of SciFact and NFCorpus
    python tools/time_splitter.py --every 1       # the whole corpora (minutes)

Prints the documents timed, the seconds, the milliseconds a document and the corpora's estimated total.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from minidecoder.evaluation.retrieval import load_beir_set  # noqa: E402
from minidecoder.methods.text import split_sentences  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default="scifact,nfcorpus")
    parser.add_argument("--every", type=int, default=20, help="time every Nth document (default 20)")
    parser.add_argument("--data", default=None, help="the BEIR folder (default: ../shared/data/beir)")
    args = parser.parse_args(argv)
    documents = [text for name in args.sets.split(",") for text in load_beir_set(name, args.data).documents]
    timed = documents[::args.every]
    split_sentences(timed[0])  # pysbd's segmenter is built once, outside the timing
    start = time.perf_counter()
    for text in timed:
        split_sentences(text)
    seconds = time.perf_counter() - start
    per_document = seconds / len(timed)
    print(f"{len(timed)} of {len(documents)} documents in {seconds:.1f} s: {1000 * per_document:.1f} ms a document, "
          f"about {per_document * len(documents):.0f} s for all {len(documents)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
