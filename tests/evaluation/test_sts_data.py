"""STS loaders: pair counts, and agreement with a transcription of SentEval's own readers."""
from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest

from minidecoder.errors import InputError
from minidecoder.evaluation.sts import ALL_SEVEN, STS_YEARS, TASKS, load_task, load_tasks, resolve_data_dir
from minidecoder.sources.paths import sts_data_dir

DATA = sts_data_dir()
needs_data = pytest.mark.skipif(DATA is None or not DATA.is_dir(), reason="STS data not found (set MINIDECODER_STS_DATA)")

PAIRS = {
    "STS12": 3108,
    "STS13": 1500,
    "STS14": 3750,
    "STS15": 3000,
    "STS16": 1186,
    "STSBenchmark": 1379,
    "STSBenchmark-dev": 1500,
    "SICKRelatedness": 4927,
}


# --- SentEval's readers, transcribed from the SimCSE-fork `senteval/sts.py` vendored by
# --- kongds/scaling_sentemb and fuyuchenIfyw/token_prepending (numpy masking written as a filter).

def senteval_sts_year(fpath: str, datasets: list[str]) -> dict[str, tuple[list[list[str]], list[list[str]], list[float]]]:
    data = {}
    for dataset in datasets:
        sent1, sent2 = zip(*[l.split("\t") for l in
                             io.open(fpath + "/STS.input.%s.txt" % dataset, encoding="utf8").read().splitlines()])
        raw_scores = [x for x in io.open(fpath + "/STS.gs.%s.txt" % dataset, encoding="utf8").read().splitlines()]
        not_empty_idx = [x != "" for x in raw_scores]
        gs_scores = [float(x) for x, keep in zip(raw_scores, not_empty_idx) if keep]
        sent1 = [s.split() for s, keep in zip(sent1, not_empty_idx) if keep]
        sent2 = [s.split() for s, keep in zip(sent2, not_empty_idx) if keep]
        sorted_data = sorted(zip(sent1, sent2, gs_scores), key=lambda z: (len(z[0]), len(z[1]), z[2]))
        sent1, sent2, gs_scores = map(list, zip(*sorted_data))
        data[dataset] = (sent1, sent2, gs_scores)
    return data


def senteval_pair_file(fpath: str, columns: tuple[int, int, int], skip_first_line: bool
                       ) -> tuple[list[list[str]], list[list[str]], list[float]]:
    """STSBenchmarkEval.loadFile (columns 5, 6, 4) and SICKRelatednessEval.loadFile (a header, then 1, 2, 3):
    one reader with the two classes' column numbers, since the two differ in nothing else."""
    a, b, score = columns
    sick_data = {"X_A": [], "X_B": [], "y": []}
    with io.open(fpath, "r", encoding="utf-8") as f:
        for line in f:
            if skip_first_line:
                skip_first_line = False
            else:
                text = line.strip().split("\t")
                sick_data["X_A"].append(text[a].split())
                sick_data["X_B"].append(text[b].split())
                sick_data["y"].append(text[score])
    sick_data["y"] = [float(s) for s in sick_data["y"]]
    return sick_data["X_A"], sick_data["X_B"], sick_data["y"]


def senteval_task(name: str, root: Path) -> dict[str, tuple[list[list[str]], list[list[str]], list[float]]]:
    """SentEval's data for a task as {subset: (words1, words2, gold)} (SentEval's sorted order)."""
    if name in STS_YEARS:
        return senteval_sts_year(str(root / f"{name}-en-test"), STS_YEARS[name])
    if name == "STSBenchmark":
        return {"test": senteval_pair_file(str(root / "STSBenchmark/sts-test.csv"), (5, 6, 4), False)}
    if name == "STSBenchmark-dev":
        return {"dev": senteval_pair_file(str(root / "STSBenchmark/sts-dev.csv"), (5, 6, 4), False)}
    return {"test": senteval_pair_file(str(root / "SICK/SICK_test_annotated.txt"), (1, 2, 3), True)}


# --- tests

@needs_data
@pytest.mark.parametrize("name", TASKS)
def test_pair_counts(name: str) -> None:
    task = load_task(name, DATA)
    assert task.pairs == PAIRS[name]
    assert all(len(s.sentences1) == len(s.sentences2) == len(s.gold) for s in task.subsets.values())
    assert task.setting == ("all" if name in STS_YEARS else "dev" if name.endswith("-dev") else "test")


@needs_data
@pytest.mark.parametrize("name", TASKS)
def test_same_pairs_as_senteval(name: str) -> None:
    ours = load_task(name, DATA)
    reference = senteval_task(name, DATA)
    assert list(ours.subsets) == list(reference)
    for subset, (words1, words2, gold) in reference.items():
        mine = ours.subsets[subset]
        # SentEval's batcher joins the word lists with single spaces; it also sorts pairs (a no-op for scores)
        expected = sorted(zip([" ".join(w) for w in words1], [" ".join(w) for w in words2], gold))
        assert sorted(zip(mine.sentences1, mine.sentences2, mine.gold)) == expected


@needs_data
def test_sentences_are_joined_words() -> None:
    task = load_task("STSBenchmark", DATA)
    sub = task.subsets["test"]
    assert sub.sentences1[2] == "one woman is measuring another woman ' s ankle ."
    assert sub.gold[:3] == [2.5, 3.6, 5.0]
    sick = load_task("SICKRelatedness", DATA).subsets["test"]
    assert not any(s.endswith("\r") or "\r" in s for s in sick.sentences1 + sick.sentences2)
    assert sick.sentences1[0] == "There is no boy playing outdoors and there is no man smiling"
    assert sick.gold[0] == 3.3


@needs_data
def test_limit_keeps_first_pairs_of_each_subset() -> None:
    full, short = load_task("STS15", DATA), load_task("STS15", DATA, limit=5)
    assert short.limit == 5 and short.pairs == 5 * len(STS_YEARS["STS15"])
    for name, subset in short.subsets.items():
        assert subset.sentences1 == full.subsets[name].sentences1[:5]
        assert subset.gold == full.subsets[name].gold[:5]


@needs_data
def test_sentences_are_distinct_in_first_appearance_order() -> None:
    task = load_task("STS13", DATA)
    sentences = task.sentences()
    assert len(sentences) == len(set(sentences))
    first = task.subsets["FNWN"]
    assert sentences[:2] == [first.sentences1[0], first.sentences2[0]]


def test_unknown_task_and_duplicates_are_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="STS17"):
        load_tasks(["STS12", "STS17"], tmp_path)
    with pytest.raises(InputError, match="the STS task list names STS12 twice"):  # by name, before any file
        load_tasks(["STS12", "STS13", "STS12"], tmp_path)
    with pytest.raises(InputError, match="limit"):
        load_task("STS12", tmp_path, limit=1)


def test_missing_data_dir_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError) as info:
        resolve_data_dir(tmp_path / "nowhere")
    assert "--data" in info.value.fix


@needs_data
def test_missing_and_misaligned_files_are_named(tmp_path: Path) -> None:
    shutil.copytree(DATA / "STS13-en-test", tmp_path / "STS13-en-test")
    gold = tmp_path / "STS13-en-test" / "STS.gs.FNWN.txt"
    gold.chmod(0o644)
    gold.write_text(gold.read_text().rsplit("\n", 3)[0] + "\n")  # drop lines
    with pytest.raises(InputError, match="STS.gs.FNWN.txt"):
        load_task("STS13", tmp_path)
    with pytest.raises(InputError, match="STS.input.MSRpar.txt"):
        load_task("STS12", tmp_path)


def test_all_seven_are_the_published_set() -> None:
    assert ALL_SEVEN == ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness")
