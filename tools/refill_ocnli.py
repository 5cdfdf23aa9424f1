"""Give the C-MTEB rows made before `eval cmteb` kept Ocnli's cosines their Ocnli interval.

    python tools/refill_ocnli.py --out results/qwen2.5-coder-0.5b-instruct-cmteb --model qwen2.5-coder-0.5b-instruct

Ocnli's interval is drawn from the pairs' cosines (cmteb.best_accuracy_interval), and the first rows kept
only mteb's scores. For each such row this re-runs the row's own `eval cmteb` command on Ocnli alone, here,
and takes the cosines and interval from the re-run only if it reproduces the row: the same model weights,
tokenizer, method settings and Ocnli file (by sha256), and the same best accuracy (a different score means
the cosines are not the ones the row was scored on, and nothing is written). The row keeps its own score;
its Ocnli entry gains the cosines, the interval, and "interval_from" (where and when the re-run ran, and
its command), and the row's Markdown report is rewritten to show the interval and say where it came from.
Then the table and claims file are rebuilt as tools/reproduce_retrieval.py writes them.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import reproduce_retrieval as rows_tool  # noqa: E402

OCNLI_FILE = "OCNLI/dev.json"


def identity(stamp: dict) -> dict:
    """What makes a row's Ocnli cosines, besides the device: the weights, tokenizer, method and file."""
    model = stamp.get("model_identity") or {}
    return {"weights": model.get("weights"), "config": model.get("config_sha256"),
            "tokenizer": stamp.get("tokenizer_sha256"), "dtype": stamp.get("dtype"), "method": stamp.get("method"),
            "truncate": stamp.get("truncate"), "limit": stamp.get("limit"),
            "ocnli": (stamp.get("data_sha256") or {}).get(OCNLI_FILE)}


def rerun(key: str, method: str, options: dict, args: argparse.Namespace, scratch: Path) -> dict:
    """The row's eval command on Ocnli alone, in its own process; its report."""
    asked = argparse.Namespace(**{**vars(args), "tasks": "Ocnli"})
    argv = rows_tool.command("cmteb", method, options, asked, scratch / key)
    print(f"{key}: minidecoder {' '.join(argv)}", flush=True)
    code = subprocess.call([sys.executable, "-m", "minidecoder", *argv], cwd=rows_tool.REPO,
                           env=rows_tool.child_environment())
    if code != 0:
        raise SystemExit(f"{key}: the Ocnli re-run stopped (status {code}); nothing was written")
    return json.loads((scratch / f"{key}.json").read_text())


def refill(key: str, row: dict, again: dict) -> dict:
    """`row` with its Ocnli entry given the re-run's cosines and interval, or SystemExit if they differ."""
    kept, fresh = identity(row["stamp"]), identity(again["stamp"])
    differ = [name for name in kept if kept[name] != fresh[name]]
    if differ:
        raise SystemExit(f"{key}: the re-run differs from the row in {', '.join(differ)}; its cosines are not the "
                         "row's, nothing was written (use the weights and data the row was made with)")
    old, new = row["results"]["sets"]["Ocnli"], again["results"]["sets"]["Ocnli"]
    if old["pairs"] != new["pairs"] or abs(old["score"] - new["score"]) > 1e-9:
        raise SystemExit(f"{key}: the re-run's Ocnli best accuracy is {new['score']:.4f} over {new['pairs']} pairs, "
                         f"the row's {old['score']:.4f} over {old['pairs']}; its cosines do not reproduce the row's "
                         "score, so its interval would not be the row's: nothing was written")
    stamp = again["stamp"]
    old.update(cosines=new["cosines"], ci95=new["ci95"],
               interval_from={"device": stamp.get("device"), "date": stamp.get("date"), "code": stamp.get("code"),
                              "command": stamp.get("command"), "score": new["score"]})
    return row


def save(path: Path, row: dict) -> None:
    """The row's report (.json as `eval cmteb` writes it) and its Markdown, with the interval's source."""
    from minidecoder.evaluation.cmteb import markdown
    from minidecoder.output_files import write_whole  # whole or not at all, under the report's lock

    source = row["results"]["sets"]["Ocnli"]["interval_from"]
    note = (f"Ocnli's interval was added later, from a re-run of Ocnli alone on {source['device']} "
            f"({source['date']}, `{source['command']}`) that reproduced the row's best accuracy "
            "(tools/refill_ocnli.py).\n\n## Run\n")
    text = markdown(row["results"], row["stamp"]).replace("## Run\n", note, 1)
    write_whole(path, (json.dumps(row, indent=2, allow_nan=False) + "\n").encode("utf-8"), overwrite=True)
    write_whole(path.with_suffix(".md"), text.encode("utf-8"), overwrite=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="the C-MTEB table's folder of row reports")
    parser.add_argument("--model", default=rows_tool.DEFAULT_MODEL["cmteb"])
    parser.add_argument("--results", type=Path, default=rows_tool.REPO / "results", help="folder of the claims file")
    parser.add_argument("--data", default=None, help="the C-MTEB folder (default: where eval cmteb looks)")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--limit", type=int, default=None)
    args = parser.parse_args(argv)
    args.corpus_limit = None
    done, start = 0, time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="refill-ocnli-") as scratch:
        for key, _, method, options in rows_tool.ROWS["cmteb"]:
            path = args.out / f"{key}.json"
            if not path.exists():
                continue
            row = json.loads(path.read_text())
            ocnli = row["results"]["sets"].get("Ocnli")
            if ocnli is None or ocnli.get("cosines") is not None:
                print(f"{key}: {'no Ocnli cell' if ocnli is None else 'has its interval'}; left as it is")
                continue
            rows_tool.refuse_other_settings(key, row["stamp"], args)
            row = refill(key, row, rerun(key, method, options, args, Path(scratch)))
            save(path, row)
            got = row["results"]["sets"]["Ocnli"]
            print(f"{key}: Ocnli {got['score']:.2f} [{got['ci95'][0]:.2f}, {got['ci95'][1]:.2f}]", flush=True)
            done += 1
    table_args = argparse.Namespace(**vars(args), tasks=None)
    minutes = (time.perf_counter() - start) / 60
    print(f"{done} row(s) refilled in {minutes:.0f} min; table: {rows_tool.write_table('cmteb', table_args)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
