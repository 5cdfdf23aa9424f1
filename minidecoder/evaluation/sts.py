"""Loaders for the seven STS test sets (and STS-B dev), read exactly as SentEval reads them.

The published numbers of PromptEOL, TP, CP and MetaEOL come from the SimCSE fork of SentEval that
kongds/scaling_sentemb and fuyuchenIfyw/token_prepending vendor (`SentEval/senteval/sts.py`; the
two copies read files identically; upstream is facebookresearch/SentEval `senteval/sts.py`):

- STS12-16 (`STSEval.loadFile`): `io.open(..., encoding='utf8').read().splitlines()` of
  `STS.input.<subset>.txt`, each line `split("\\t")` into exactly two sentences; gold from
  `STS.gs.<subset>.txt` the same way; pairs whose gold line is `''` are dropped; each sentence
  becomes `s.split()`. Note `splitlines`, not `split("\\n")`: it also breaks at \\r, \\x85,
  \\u2028 and friends (none occur in these files today, but a loader that differs would
  disagree silently on a file that has one).
- STS-B (`STSBenchmarkEval` / `STSBenchmarkEvalDev.loadFile`): iterate the file's lines,
  `line.strip().split('\\t')`, score column 4, sentences columns 5 and 6, no quoting parser.
  The fork scores only the `test` split for `STSBenchmark` (upstream SentEval trains a regressor
  on it instead) and `dev` for `STSBenchmark-dev`.
- SICK-R (`SICKRelatednessEval.loadFile`): skip the header line, `line.strip().split('\\t')`,
  sentences columns 1 and 2, relatedness column 3; `strip` also eats the CRLF. Test split only.

SentEval's batcher receives word lists and joins them with single spaces, so the sentences here are
stored already joined (`" ".join(s.split())`); joining is lossless because `split()` leaves no
whitespace inside a word. SentEval also sorts pairs by length inside each subset; that changes no
score (Spearman is invariant to reordering pairs) and is not reproduced: pairs keep file order.

Scoring convention (the fork's `run`): STS12-16 report "all", one Spearman over the concatenation
of every subset of the year; STS-B and SICK-R report their single split.

Every gold score is read as SentEval reads it (`float`) and must be a finite number: a score `abc` or
`nan` is named with its file and line when the data is read, before anything is embedded (SentEval
would fail on `abc` and rank `nan` arbitrarily at the end).
"""
from __future__ import annotations

import io
import math
from dataclasses import dataclass, field
from pathlib import Path

from minidecoder.errors import InputError, describe_unusable_file
from minidecoder.evaluation.data_files import limit_that_cut, require_rows
from minidecoder.sources.paths import sts_data_dir

# Subset order as in SentEval's STS12Eval..STS16Eval (order only affects the per-subset listing).
STS_YEARS: dict[str, list[str]] = {
    "STS12": ["MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"],
    "STS13": ["FNWN", "headlines", "OnWN"],  # SMT withheld by its licence, as in SentEval
    "STS14": ["deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"],
    "STS15": ["answers-forums", "answers-students", "belief", "headlines", "images"],
    "STS16": ["answer-answer", "headlines", "plagiarism", "postediting", "question-question"],
}
ALL_SEVEN: tuple[str, ...] = ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness")
TASKS: tuple[str, ...] = ALL_SEVEN + ("STSBenchmark-dev",)


@dataclass
class StsSubset:
    """Aligned pairs of one subset: `sentences1[i]`, `sentences2[i]` and their gold score `gold[i]`."""

    name: str
    sentences1: list[str]
    sentences2: list[str]
    gold: list[float]

    def __len__(self) -> int:
        return len(self.gold)


@dataclass
class StsTask:
    """One task as reported: its subsets and how they are aggregated into the task's score.

    `setting` is "all" (STS12-16: one Spearman over all subsets concatenated) or the name of the
    single split ("test", "dev"). `files` are the data files read, relative to `data_dir`.
    """

    name: str
    setting: str
    subsets: dict[str, StsSubset]
    data_dir: Path
    files: list[str] = field(default_factory=list)
    limit: int | None = None

    @property
    def pairs(self) -> int:
        return sum(len(subset) for subset in self.subsets.values())

    def sentences(self) -> list[str]:
        """Every distinct sentence of the task, in first-appearance order."""
        seen: dict[str, None] = {}
        for subset in self.subsets.values():
            for s1, s2 in zip(subset.sentences1, subset.sentences2):
                seen.setdefault(s1)
                seen.setdefault(s2)
        return list(seen)


def resolve_data_dir(data_dir: str | Path | None = None) -> Path:
    """`data_dir` if given, else `minidecoder.sources.paths.sts_data_dir()`; it must exist."""
    path = Path(data_dir).expanduser() if data_dir is not None else sts_data_dir()
    if path is None or not path.is_dir():
        if path is not None and path.exists():
            why = "is a file, not a folder"
        else:
            why = "does not exist" if path is None else describe_unusable_file(path, "folder")
        raise InputError(
            f"STS data folder {str(path) if path is not None else '(none found)'} {why}",
            "pass --data DIR (or set MINIDECODER_STS_DATA) to the folder holding STS12-en-test ... SICK",
        )
    return path


def _read_lines(path: Path) -> list[str]:
    if not path.is_file():
        raise InputError(f"STS data file {path} {_missing(path)}", "point --data at a complete SentEval-layout STS folder")
    with io.open(path, encoding="utf8") as handle:
        try:
            return handle.read().splitlines()  # splitlines, as SentEval's STSEval.loadFile
        except UnicodeDecodeError as error:
            raise _not_utf8(path, error) from None


def _missing(path: Path) -> str:
    why = describe_unusable_file(path)
    return "is missing" if why == "does not exist" else why


def _not_utf8(path: Path, error: UnicodeDecodeError) -> InputError:
    line = error.object[:error.start].count(b"\n") + 1 if isinstance(error.object, bytes) else "?"
    return InputError(f"STS data file {path} is not valid UTF-8 (byte {error.start}, line {line})",
                      "restore the file from SentEval's download script, or re-encode it as UTF-8 "
                      "(e.g. `iconv -f latin1 -t utf-8`)")


def _gold(text: str, path: Path, number: int) -> float:
    """A gold score as SentEval reads it (`float`), refused unless it is a finite number."""
    try:
        score = float(text)
    except ValueError:
        score = None
    if score is None or not math.isfinite(score):
        raise InputError(f"STS data file {path} line {number}: the gold score {text!r} is not a finite number",
                         "restore the file unchanged from SentEval's download script")
    return score


def load_sts_year(name: str, data_dir: Path, limit: int | None = None) -> StsTask:
    """STS12..STS16 from `<name>-en-test/STS.input.<subset>.txt` and `STS.gs.<subset>.txt`."""
    folder = f"{name}-en-test"
    subsets: dict[str, StsSubset] = {}
    files: list[str] = []
    for subset in STS_YEARS[name]:
        input_name, gold_name = f"{folder}/STS.input.{subset}.txt", f"{folder}/STS.gs.{subset}.txt"
        files += [input_name, gold_name]
        lines, raw_gold = _read_lines(data_dir / input_name), _read_lines(data_dir / gold_name)
        if len(lines) != len(raw_gold):
            raise InputError(
                f"{data_dir / input_name} has {len(lines)} lines but {gold_name} has {len(raw_gold)}",
                "the two files must be line-aligned; restore them from SentEval's download script",
            )
        s1s, s2s, gold = [], [], []
        for number, (line, score) in enumerate(zip(lines, raw_gold), start=1):
            columns = line.split("\t")
            if len(columns) != 2:
                raise InputError(
                    f"{data_dir / input_name} line {number} has {len(columns)} tab-separated fields, expected 2",
                    "restore the file unchanged from SentEval's download script",
                )
            if score == "":  # no gold: SentEval drops the pair
                continue
            s1s.append(" ".join(columns[0].split()))
            s2s.append(" ".join(columns[1].split()))
            gold.append(_gold(score, data_dir / gold_name, number))
        subsets[subset] = StsSubset(subset, s1s, s2s, require_pairs(data_dir / gold_name, gold))
    return _limited(StsTask(name, "all", subsets, data_dir, files), limit)


def _load_columns(path: Path, skip_header: bool, s1: int, s2: int, score: int) -> tuple[list[str], list[str], list[float]]:
    """Tab-separated rows, `line.strip().split('\\t')` as SentEval's STS-B and SICK loaders do."""
    if not path.is_file():
        raise InputError(f"STS data file {path} {_missing(path)}", "point --data at a complete SentEval-layout STS folder")
    s1s, s2s, gold = [], [], []
    try:
        path.read_bytes().decode("utf-8")  # STS files are small: a bad byte is named before any row is read
    except UnicodeDecodeError as error:
        raise _not_utf8(path, error) from None
    with io.open(path, "r", encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if skip_header and number == 1:
                continue
            columns = line.strip().split("\t")
            if len(columns) <= max(s1, s2, score):
                raise InputError(
                    f"{path} line {number} has {len(columns)} tab-separated fields, expected at least {max(s1, s2, score) + 1}",
                    "restore the file unchanged; do not re-save it with a CSV tool",
                )
            s1s.append(" ".join(columns[s1].split()))
            s2s.append(" ".join(columns[s2].split()))
            gold.append(_gold(columns[score], path, number))
    return s1s, s2s, gold


def load_sts_benchmark(split: str, data_dir: Path, limit: int | None = None) -> StsTask:
    """STS-B `sts-<split>.csv`: score column 4, sentences columns 5 and 6."""
    name = "STSBenchmark" if split == "test" else f"STSBenchmark-{split}"
    relative = f"STSBenchmark/sts-{split}.csv"
    s1s, s2s, gold = _load_columns(data_dir / relative, skip_header=False, s1=5, s2=6, score=4)
    gold = require_pairs(data_dir / relative, gold)
    return _limited(StsTask(name, split, {split: StsSubset(split, s1s, s2s, gold)}, data_dir, [relative]), limit)


def load_sick_relatedness(data_dir: Path, limit: int | None = None) -> StsTask:
    """SICK-R test: header line, sentences columns 1 and 2, relatedness column 3."""
    relative = "SICK/SICK_test_annotated.txt"
    s1s, s2s, gold = _load_columns(data_dir / relative, skip_header=True, s1=1, s2=2, score=3)
    gold = require_pairs(data_dir / relative, gold)
    return _limited(StsTask("SICKRelatedness", "test", {"test": StsSubset("test", s1s, s2s, gold)}, data_dir, [relative]),
                    limit)


def require_pairs(path: Path, gold: list[float]) -> list[float]:
    """`gold` if the file gave pairs, else an InputError naming it (empty, a header alone, or no pair with gold)."""
    require_rows(path, len(gold), "scored sentence pairs", "it is empty, a header alone, or has no gold score")
    return gold


def _limited(task: StsTask, limit: int | None) -> StsTask:
    """The task with the first `limit` pairs of each subset, stamped with the limit only where it cut one."""
    task.limit = limit_that_cut(limit, [len(subset.gold) for subset in task.subsets.values()])
    if task.limit is not None:
        task.subsets = {name: StsSubset(name, subset.sentences1[:limit], subset.sentences2[:limit], subset.gold[:limit])
                        for name, subset in task.subsets.items()}
    return task


def load_task(name: str, data_dir: str | Path | None = None, limit: int | None = None) -> StsTask:
    """Load one task by its SentEval name (`TASKS`); `limit` keeps the first N pairs of each subset."""
    if limit is not None and limit < 2:
        raise InputError(f"limit {limit} is too small", "use a limit of at least 2 pairs (a correlation needs two)")
    root = resolve_data_dir(data_dir)
    if name in STS_YEARS:
        return load_sts_year(name, root, limit)
    if name == "STSBenchmark":
        return load_sts_benchmark("test", root, limit)
    if name == "STSBenchmark-dev":
        return load_sts_benchmark("dev", root, limit)
    if name == "SICKRelatedness":
        return load_sick_relatedness(root, limit)
    raise InputError(f"unknown STS task {name!r}", "choose from " + ", ".join(TASKS))


def load_tasks(names: list[str] | tuple[str, ...], data_dir: str | Path | None = None, limit: int | None = None) -> list[StsTask]:
    """Load several tasks; names are checked before any file is read."""
    unknown = [name for name in names if name not in TASKS]
    if unknown:
        raise InputError(f"unknown STS task(s) {', '.join(map(repr, unknown))}", "choose from " + ", ".join(TASKS))
    if len(set(names)) != len(names):
        raise InputError(f"STS task list {list(names)} names a task twice", "list each task once")
    return [load_task(name, data_dir, limit) for name in names]
