"""The STS family: the seven STS test sets read as SentEval reads them, scored by Spearman x100 of
cosine against gold, and `minidecoder eval sts`.

Encoding and scoring are separate on purpose:

    tasks = load_tasks(ALL_SEVEN)
    sentences = unique_sentences(tasks)              # every distinct sentence, once
    vectors = encode_sentences(encode, sentences)    # (N, D), row i is sentences[i]
    results = StsScorer(tasks, sentences)(vectors)   # cheap; call again per layer / option

A sweep that gets many layers from one forward pass builds one `StsScorer` and calls it once per
embedding set; `evaluate_sts` is the three lines above plus timing.

Conventions (docs/spec.md section 9; the SimCSE-fork SentEval `STSEval.run` vendored by
PromptEOL and TP): similarity is the cosine of the two embeddings, NaN (a zero vector) scored as 0
like SentEval's `np.nan_to_num`; STS12-16 are scored "all" (one Spearman over the concatenation of
every subset of the year) and per subset; STS-B and SICK-R on their test split; "Avg." is the mean
of the seven. SentEval embeds the two sides of every batch separately and repeats sentences; here
each distinct sentence is embedded once, which changes nothing for a method whose embedding of a
sentence does not depend on the rest of its batch (padding-invariance is tested by the methods).
Cosines are computed in float64, and a pair of identical sentences (79 in STS12, 14 elsewhere) scores
exactly 1, so those pairs form one tie: the score is a property of the embeddings, not of batching noise.
SentEval embeds a pair's two sides in separate batches and takes float32 cosines, so its self-pairs land at
1 minus rounding noise and are ordered by it, so where self-pairs are many (STS12 SMTeuroparl) its per-subset
numbers can differ from these; `test_self_pairs_are_exactly_one_and_tied_unlike_senteval` pins the rule.

The data: the seven STS test sets (and STS-B dev), read exactly as SentEval reads them.

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

Every gold score is read as SentEval reads it (`float`) and must be a finite number: a score `abc` or
`nan` is named with its file and line when the data is read, before anything is embedded (SentEval
would fail on `abc` and rank `nan` arbitrarily at the end).
"""
from __future__ import annotations

import argparse
import io
import math
import shlex
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from minidecoder.running.command_line import (add_model_options, add_output_options, argv_of, build_cli_method,
                                             check_sizes, claim_cli_outputs, default_prefix, load_model, model_stamp)
from minidecoder.errors import InputError, OutputError, describe_unusable_file, is_whole_number
from minidecoder.evaluation.bootstrap import pearson, rankdata
from minidecoder.evaluation.family import (Encoder, embed_kept, encode_sentences, failed_past_the_job, limit_that_cut,
                                           longest_first, parse_names, past_the_job, refuse_reading_options,
                                           refuse_repeats, require_rows, resolve_data_folder)
from minidecoder.running.embedding import check_texts_fit

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
    """Aligned pairs of one subset: `sentences1[i]`, `sentences2[i]` and their gold score `gold[i]`, read from
    `lines[i]` ("FILE line N", to name a pair by)."""

    name: str
    sentences1: list[str]
    sentences2: list[str]
    gold: list[float]
    lines: list[str] = field(default_factory=list)

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
    """`data_dir` if given, else $MINIDECODER_STS_DATA or ../shared/data/sts; it must be a folder."""
    return resolve_data_folder(data_dir, "sts", "the folder holding STS12-en-test ... SICK", "STS")


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
        s1s, s2s, gold, where = [], [], [], []
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
            where.append(f"{data_dir / input_name} line {number}")
        subsets[subset] = StsSubset(subset, s1s, s2s, require_pairs(data_dir / gold_name, gold), where)
    return _limited(StsTask(name, "all", subsets, data_dir, files), limit)


def _load_columns(path: Path, skip_header: bool, s1: int, s2: int, score: int) -> tuple[list, list, list, list]:
    """Tab-separated rows, `line.strip().split('\\t')` as SentEval's STS-B and SICK loaders do: the sentences,
    gold scores and "FILE line N" of each pair."""
    if not path.is_file():
        raise InputError(f"STS data file {path} {_missing(path)}", "point --data at a complete SentEval-layout STS folder")
    s1s, s2s, gold, where = [], [], [], []
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
            where.append(f"{path} line {number}")
    return s1s, s2s, gold, where


def load_sts_benchmark(split: str, data_dir: Path, limit: int | None = None) -> StsTask:
    """STS-B `sts-<split>.csv`: score column 4, sentences columns 5 and 6."""
    name = "STSBenchmark" if split == "test" else f"STSBenchmark-{split}"
    relative = f"STSBenchmark/sts-{split}.csv"
    s1s, s2s, gold, where = _load_columns(data_dir / relative, skip_header=False, s1=5, s2=6, score=4)
    gold = require_pairs(data_dir / relative, gold)
    return _limited(StsTask(name, split, {split: StsSubset(split, s1s, s2s, gold, where)}, data_dir, [relative]),
                    limit)


def load_sick_relatedness(data_dir: Path, limit: int | None = None) -> StsTask:
    """SICK-R test: header line, sentences columns 1 and 2, relatedness column 3."""
    relative = "SICK/SICK_test_annotated.txt"
    s1s, s2s, gold, where = _load_columns(data_dir / relative, skip_header=True, s1=1, s2=2, score=3)
    gold = require_pairs(data_dir / relative, gold)
    return _limited(StsTask("SICKRelatedness", "test", {"test": StsSubset("test", s1s, s2s, gold, where)}, data_dir,
                            [relative]), limit)


def require_pairs(path: Path, gold: list[float]) -> list[float]:
    """`gold` if the file gave pairs, else an InputError naming it (empty, a header alone, or no pair with gold)."""
    require_rows(path, len(gold), "scored sentence pairs", "it is empty, a header alone, or has no gold score")
    return gold


def _limited(task: StsTask, limit: int | None) -> StsTask:
    """The task with the first `limit` pairs of each subset, stamped with the limit only where it cut one."""
    task.limit = limit_that_cut(limit, [len(subset.gold) for subset in task.subsets.values()])
    if task.limit is not None:
        task.subsets = {name: StsSubset(name, subset.sentences1[:limit], subset.sentences2[:limit], subset.gold[:limit],
                                        subset.lines[:limit])
                        for name, subset in task.subsets.items()}
    return task


def check_pair_limit(limit: int | None) -> int | None:
    """A limit of pairs (the CLI's --limit, the API's `limit=`; a NumPy integer is one) keeps at least the two
    pairs a correlation needs; the message names both spellings, for it is read by users of either."""
    if limit is not None and not is_whole_number(limit):
        raise InputError(f"limit={limit!r} is not a whole number of pairs", "e.g. limit=100 (--limit 100)")
    if limit is not None and limit < 2:
        raise InputError(f"--limit (limit=) {limit} is too small: a correlation needs at least 2 pairs",
                         "use --limit 2 or more (limit=2 from Python), or none to score every pair")
    return None if limit is None else int(limit)


def load_task(name: str, data_dir: str | Path | None = None, limit: int | None = None) -> StsTask:
    """Load one task by its SentEval name (`TASKS`); `limit` keeps the first N pairs of each subset."""
    limit = check_pair_limit(limit)
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
    refuse_repeats(list(names), "the STS task list")
    return [load_task(name, data_dir, limit) for name in names]


def refuse_empty_sentences(tasks: Sequence[StsTask], method) -> None:
    """An empty sentence (no STS file holds one; an edited file may), named by its file and line before the
    model loads, for a method that pools over the text's own tokens: it has nothing to pool. A prompt method
    embeds it, as SentEval's batchers do."""
    if method.reads_empty_text():
        return
    for task in tasks:
        for subset in task.subsets.values():
            for i, pair in enumerate(zip(subset.sentences1, subset.sentences2)):
                if "" in pair:
                    where = subset.lines[i] if i < len(subset.lines) else f"{task.name} pair {i + 1}"
                    raise InputError(f"{where} holds an empty sentence, and method {method.name!r} pools over a text's "
                                     "own tokens: it has nothing to pool",
                                     "fill or remove that pair, or use a prompt method read at its last token "
                                     "(e.g. prompteol)")


def unique_sentences(tasks: Sequence[StsTask]) -> list[str]:
    """Every distinct sentence of the tasks, longest first (`longest_first`)."""
    return longest_first(sentence for task in tasks for sentence in task.sentences())


def pair_cosines(first: torch.Tensor, second: torch.Tensor, same: np.ndarray) -> np.ndarray:
    """The cosine of each pair (row i of `first` with row i of `second`), float64. `same` marks pairs of
    one sentence with itself: exactly 1, one tie (a choice; its effect: the module docstring)."""
    a, b = first.double(), second.double()  # (P, D)
    norm_a, norm_b = a.norm(dim=-1), b.norm(dim=-1)  # (P,)
    cosine = (a * b).sum(-1) / (norm_a * norm_b)  # (P,)
    cosine = torch.where(torch.as_tensor(same, device=cosine.device) & (norm_a > 0), torch.ones_like(cosine), cosine)
    return torch.nan_to_num(cosine, nan=0.0).cpu().numpy()  # SentEval: np.nan_to_num


class StsScorer:
    """Scores embedding tables of one fixed sentence list against the gold of fixed tasks.

    Built once (pair indices and gold ranks are precomputed); each call costs one gather and one
    cosine per pair plus a rank per subset, so scoring many layers of one forward pass is cheap.
    """

    def __init__(self, tasks: Sequence[StsTask], sentences: Sequence[str]) -> None:
        index = {sentence: i for i, sentence in enumerate(sentences)}
        self.tasks = list(tasks)
        self.num_sentences = len(sentences)
        # per task: (subset names, first rows (P,), second rows (P,), gold (P,), subset bounds)
        self._pairs: list[tuple[list[str], torch.Tensor, torch.Tensor, np.ndarray, list[int]]] = []
        for task in self.tasks:
            names, rows1, rows2, gold, bounds = [], [], [], [], [0]
            for name, subset in task.subsets.items():
                missing = [s for s in subset.sentences1 + subset.sentences2 if s not in index]
                if missing:
                    raise ValueError(f"{task.name}/{name}: {len(missing)} sentences have no embedding row (first: {missing[0]!r})")
                names.append(name)
                rows1 += [index[s] for s in subset.sentences1]
                rows2 += [index[s] for s in subset.sentences2]
                gold += subset.gold
                bounds.append(len(gold))
            self._pairs.append((names, torch.tensor(rows1), torch.tensor(rows2), np.asarray(gold, np.float64), bounds))
        # gold ranks never change between calls
        self._gold_ranks = [
            (rankdata(gold), [rankdata(gold[a:b]) for a, b in zip(bounds[:-1], bounds[1:])])
            for _, _, _, gold, bounds in self._pairs
        ]

    def cosines(self, embeddings: torch.Tensor) -> list[np.ndarray]:
        """Per task, the cosine of every pair in subset order, float64. embeddings: (N, D)."""
        if embeddings.dim() != 2 or embeddings.shape[0] != self.num_sentences:
            raise ValueError(f"embeddings have shape {tuple(embeddings.shape)}; expected ({self.num_sentences}, D)")
        return [pair_cosines(embeddings[rows1.to(embeddings.device)], embeddings[rows2.to(embeddings.device)],
                             (rows1 == rows2).numpy())
                for _, rows1, rows2, _, _ in self._pairs]

    def __call__(self, embeddings: torch.Tensor) -> dict:
        """Scores of every task; see `aggregate` for the layout."""
        return self.score(self.cosines(embeddings))

    def score(self, cosines: Sequence[np.ndarray]) -> dict:
        """Scores of every task from its pairs' cosines (`cosines`' layout, however they were computed)."""
        per_task = {}
        for task, cosine, (names, _, _, gold, bounds), (gold_rank, subset_gold_ranks) in zip(
            self.tasks, cosines, self._pairs, self._gold_ranks
        ):
            subsets = {}
            for name, a, b, subset_gold_rank in zip(names, bounds[:-1], bounds[1:], subset_gold_ranks):
                subsets[name] = {"spearman": 100.0 * pearson(rankdata(cosine[a:b]), subset_gold_rank), "pairs": b - a}
            if task.setting == "all":
                score = 100.0 * pearson(rankdata(cosine), gold_rank)  # one Spearman over all subsets
            else:
                (score,) = (entry["spearman"] for entry in subsets.values())
            per_task[task.name] = {"score": score, "setting": task.setting, "pairs": len(gold), "subsets": subsets}
            if task.setting == "all":
                values = np.array([entry["spearman"] for entry in subsets.values()])
                weights = np.array([entry["pairs"] for entry in subsets.values()], dtype=np.float64)
                # what upstream SentEval calls "mean" and "wmean"; reported by some older papers
                per_task[task.name]["subset_mean"] = float(values.mean())
                per_task[task.name]["subset_wmean"] = float((values * weights).sum() / weights.sum())
        return aggregate(per_task, limit=next((t.limit for t in self.tasks if t.limit is not None), None))  # any cut


def aggregate(per_task: dict, limit: int | None) -> dict:
    """Results layout:

    {"tasks": {name: {"score", "setting", "pairs", "subsets": {subset: {"spearman", "pairs"}}, ...}},
     "avg": mean score of the test tasks given (all but STSBenchmark-dev), "avg_over": their names,
     "avg_is_published_avg": True when those are exactly the seven, "limit": N or None}
    All scores are Spearman x100.
    """
    over = [name for name in per_task if name != "STSBenchmark-dev"]
    avg = float(np.mean([per_task[name]["score"] for name in over])) if over else None
    return {
        "tasks": per_task,
        "avg": avg,
        "avg_over": over,
        "avg_is_published_avg": sorted(over) == sorted(ALL_SEVEN),
        "limit": limit,
    }


def score_embeddings(tasks: Sequence[StsTask], sentences: Sequence[str], embeddings: torch.Tensor) -> dict:
    """One-shot `StsScorer(tasks, sentences)(embeddings)`; build the scorer yourself to score many sets."""
    return StsScorer(tasks, sentences)(embeddings)


def evaluate_sts(
    encode: Encoder,
    tasks: Sequence[str] | Sequence[StsTask] = ALL_SEVEN,
    data_dir: str | Path | None = None,
    limit: int | None = None,
    progress: bool = True,
    chunk_size: int = 256,
) -> dict:
    """Evaluate `encode` on the STS tasks; returns `aggregate`'s dict plus run facts.

    `encode(sentences) -> (N, D)` gets the SentEval sentences (joined word lists; the method adds
    its own prompt handling). Every distinct sentence across the requested tasks is encoded once.
    `limit=N` scores only the first N pairs of each subset (a quick look, stamped as such). `tasks`: names,
    or tasks a caller already read (`load_tasks`; `data_dir` and `limit` are then theirs, and refused here).
    Added keys: "sentences" (number encoded), "encode_seconds", "sentences_per_second",
    "data_dir", "data_files" (paths relative to data_dir, for checksums).
    """
    if tasks and all(isinstance(t, StsTask) for t in tasks):
        refuse_reading_options("evaluate_sts", "load_tasks(names, data_dir, limit)", data_dir=data_dir, limit=limit)
        loaded = list(tasks)
    else:
        loaded = load_tasks(list(tasks), data_dir, limit)
    sentences = unique_sentences(loaded)
    start = time.perf_counter()
    vectors = encode_sentences(encode, sentences, chunk_size=chunk_size, progress=progress)
    seconds = time.perf_counter() - start
    results = StsScorer(loaded, sentences)(vectors)
    results.update(
        sentences=len(sentences),
        encode_seconds=seconds,
        sentences_per_second=len(sentences) / seconds if seconds > 0 else None,
        data_dir=str(loaded[0].data_dir) if loaded else None,
        data_files=[name for task in loaded for name in task.files],
    )
    return results


# ---- the command ---------------------------------------------------------------------------------------
# what `minidecoder eval sts --help` prints
COMMAND_HELP = """`minidecoder eval sts`: score one method on the STS tasks and write PREFIX.json and PREFIX.md.

    minidecoder eval sts --model smollm2-135m-instruct --method prompteol --opt layer=-1 \\
        --tasks STS12,STSBenchmark --limit 50 --output results/tmp/smoke

Scores are Spearman x100 of cosine vs gold (STS12-16 "all", STS-B and SICK-R test, Avg. of the
seven); see `minidecoder.evaluation`. `--opt key=value` values are read as JSON when they parse
(`3`, `0.5`, `true`, `[1, 7]`, `"text"`) and as plain strings otherwise.

The sentences are embedded as a resumable job (minidecoder.running.jobs) in `.PREFIX.json.partial/`
beside the report: Ctrl-C or a kill keeps every finished chunk of 1024 sentences, and the same command
(same --output) resumes from them. PREFIX.json and PREFIX.md are locked from before the model loads
until they are written: a second run on them is told which process holds them (or waits, --wait).
"""
OWNER = "minidecoder eval sts"  # of the kept-work folder `.PREFIX.json.partial/` (running.jobs.owned_work_folder)


def add_parser(benchmarks: argparse._SubParsersAction) -> None:
    sts = benchmarks.add_parser("sts", help="the seven STS tasks of PromptEOL / TP / CP", description=COMMAND_HELP,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sts.add_argument("--method", required=True, help="method name, e.g. prompteol, tp, cp, mean")
    sts.add_argument("--opt", action="append", default=[], metavar="KEY=VALUE", help="a method option; repeat for more")
    sts.add_argument("--tasks", default=None, help="comma-separated tasks (default: the seven; also STSBenchmark-dev)")
    sts.add_argument("--data", default=None, metavar="DIR", help="STS data folder (default: $MINIDECODER_STS_DATA or ../shared/data/sts)")
    sts.add_argument("--limit", type=int, default=None, metavar="N", help="score only the first N pairs of each subset (quick look)")
    sts.add_argument("--batch-size", type=int, default=None,
                        help="sentences per forward pass (default: each batch filled up to the device's token budget)")
    sts.add_argument("--output", default=None, metavar="PREFIX", help="write PREFIX.json and PREFIX.md (a PREFIX ending in .json or .md names that file; default: ./sts-MODEL-METHOD-DATE)")
    add_output_options(sts, "PREFIX.json / PREFIX.md")
    sts.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    add_model_options(sts)
    sts.set_defaults(run=run)


def parse_tasks(text: str | None) -> list[str]:
    return parse_names(text, list(TASKS), default=ALL_SEVEN)


def run(args: argparse.Namespace) -> int:
    from minidecoder.evaluation.report import check_report_prefix, report_paths, work_folder
    from minidecoder.running.jobs import check_work_owner

    check_sizes(args)
    tasks = parse_tasks(args.tasks)
    # everything that can fail cheaply fails before the model loads and the long run starts
    prefix = Path(args.output) if args.output else default_prefix("sts", args.model, args.method)
    check_report_prefix(prefix, args.overwrite)
    check_work_owner(work_folder(prefix), OWNER, kept_settings(args))  # never taken over, named by flag
    loaded = load_tasks(tasks, args.data, args.limit)  # every data file read and checked (a gold score "abc", --limit 1)
    method = build_cli_method(args.method, args.opt)
    refuse_empty_sentences(loaded, method)
    with claim_cli_outputs(args, list(report_paths(prefix))):  # held from before the model loads to the last write
        return _evaluate(args, tasks, loaded, prefix, method)


def _evaluate(args: argparse.Namespace, tasks: list[str], loaded: list, prefix: Path, method) -> int:
    from minidecoder.evaluation.report import summary_table, work_folder, write_or_rescue, write_report
    from minidecoder.running.jobs import owned_work_folder

    model = load_model(args)
    check_texts_fit(model, method, unique_sentences(loaded), lambda row: "an STS sentence", truncate_flag=None)
    metadata = {
        **model_stamp(args, model, method),
        "tasks": tasks,
        "command": shlex.join(["minidecoder", "eval", "sts", *argv_of(args)]),
    }

    work = work_folder(prefix)
    kept: dict = {}

    def encode(sentences: list[str]):  # every distinct sentence at once, as a resumable job in `work`
        vectors, kept["summary"] = embed_kept(model, method, sentences, work, args, prefix)
        return vectors

    # one call of `encode` with every sentence (the job draws its own progress bar)
    with owned_work_folder(work, OWNER, f"{metadata['command']} --output {shlex.quote(str(prefix))}",
                           kept_settings(args)):
        try:  # scoring and the report's write: a Ctrl-C in either keeps the embeddings
            results = evaluate_sts(encode, tasks=loaded, progress=False, chunk_size=1 << 62)  # the tasks read above
            summary = kept.get("summary")
            if summary is not None and summary["chunks_reused"]:
                # the time measured is this sitting's only: a rate over all sentences would be wrong
                results.update(resumed_chunks=summary["chunks_reused"], sentences_per_second=None)
            table = summary_table(results)
            json_path, md_path = write_or_rescue(
                lambda where: write_report(where, results, metadata, args.overwrite), prefix, table)
        except KeyboardInterrupt as stop:
            raise past_the_job(stop, work, args, prefix, embedded="summary" in kept)
        except OutputError as error:
            raise failed_past_the_job(error, work, args, prefix, embedded="summary" in kept) from None
        shutil.rmtree(work, ignore_errors=True)  # the report holds it all now
    print(table)
    print(f"\nwrote {json_path} and {md_path}")
    return 0


def kept_settings(args: argparse.Namespace) -> dict:
    """The flags that choose the sentences a kept job embeds and those that make their vectors, so that a
    resume with others is refused by flag (`--limit was 300, now 30`, `--method was 'mean', now 'last'`),
    all at once and before the model loads, never by the job's fields (`input.rows`)."""
    from minidecoder.running.command_line import resume_settings

    return resume_settings(args, ("--tasks", "--limit"))
