"""Faults where the eval data is read: a file with no rows (1), a limit that cuts nothing (2), the tables' one
path rule (3), a C-MTEB set no correlation can score (5), and a red team's malformed SentEval files.
docs/reliability.md rows 43-53 list these tests by their class numbers (the number in each test's name); each
fails on the code without its fix."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from minidecoder.errors import InputError
from minidecoder.evaluation.classification import load_classification_set
from minidecoder.evaluation.cmteb import SETS, load_pair_set
from minidecoder.evaluation.retrieval import load_beir_set
from minidecoder.evaluation.sts import load_task
from minidecoder.evaluation.transfer import load_transfer_task
from cli_runner import cli
from repo_paths import REPO
from test_classification import write_emotion
from test_cmteb import write_cmteb
from test_retrieval import write_beir
from test_transfer import MRPC_HEADER, write_folder

NO_MODEL = "no-such-model-folder"  # a run that names this and fails on something else never loaded a model


def tool(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_banking(folder: Path, test: str = "text,category\nhow old must i be,age_limit\n") -> Path:
    (folder / "Banking77").mkdir(parents=True)
    (folder / "Banking77" / "categories.json").write_text('["card_arrival", "age_limit"]')
    (folder / "Banking77" / "train.csv").write_text("text,category\nwhere is my card,card_arrival\n")
    (folder / "Banking77" / "test.csv").write_text(test)
    return folder


def write_sts_benchmark(folder: Path, rows: str) -> Path:
    (folder / "STSBenchmark").mkdir(parents=True)
    for split in ("test", "dev"):
        (folder / "STSBenchmark" / f"sts-{split}.csv").write_text(rows)
    return folder


# ---- 1. a data file with no rows is named where it is read ------------------------------------------------------
@pytest.mark.parametrize(("task", "file", "content"), [
    ("Emotion", "Emotion/train.txt", "text;label_name\n"),  # a header alone
    ("Emotion", "Emotion/test.txt", ""),
    ("Banking77", "Banking77/test.csv", "text,category\n"),
])
def test_1_a_classification_file_with_no_rows_is_named(tmp_path, capsys, task, file, content) -> None:
    folder = write_banking(write_emotion(tmp_path / "mteb"))
    (folder / file).write_text(content)
    with pytest.raises(InputError) as error:
        load_classification_set(task, folder)
    assert f"{folder / file} holds no {task} {file.split('/')[1].split('.')[0]} rows" in error.value.problem
    assert "--data" in error.value.fix
    code, err = cli(capsys, "eval", "classification", "--method", "mean", "--tasks", task, "--data", str(folder),
                    "--output", str(tmp_path / "out"), "--model", NO_MODEL)
    assert code == 2 and str(folder / file) in err and "Traceback" not in err and "0 sample" not in err, err


@pytest.mark.parametrize(("name", "content", "why"), [
    ("PAWSX", "", "it is empty"),
    ("Ocnli", '{"sentence1": "a", "sentence2": "b", "label": "neutral"}\n', "every one of its 1 pairs is neutral or unlabelled"),
])
def test_1_a_cmteb_file_with_no_pairs_is_named(tmp_path, capsys, name, content, why) -> None:
    folder = write_cmteb(tmp_path / "cmteb")
    (folder / SETS[name][0]).parent.mkdir(exist_ok=True)
    (folder / SETS[name][0]).write_text(content)
    with pytest.raises(InputError, match="holds no sentence pairs") as error:
        load_pair_set(name, folder)
    assert str(folder / SETS[name][0]) in error.value.problem and why in error.value.problem
    code, err = cli(capsys, "eval", "cmteb", "--method", "mean", "--tasks", name, "--data", str(folder),
                    "--output", str(tmp_path / "out"), "--model", NO_MODEL)
    assert code == 2 and "holds no sentence pairs" in err and "Traceback" not in err, err


@pytest.mark.parametrize(("task", "key", "content"), [
    ("MR", "MR__rt-polarity.neg", "\n \n"),  # blank lines only
    ("SST2", "SST__binary__sentiment-test", ""),
    ("TREC", "TREC__TREC_10.label", ""),
    ("MRPC", "MRPC__msr_paraphrase_test.txt", MRPC_HEADER),  # a header alone
])
def test_1_a_senteval_file_with_no_rows_is_named(tmp_path, task, key, content) -> None:
    good = MRPC_HEADER + "".join(f"{i % 2}\t1\t2\tsentence {i} a\tsentence {i} b\n" for i in range(24))
    root = write_folder(tmp_path, **{"MRPC__msr_paraphrase_train.txt": good, "MRPC__msr_paraphrase_test.txt": good,
                                     key: content})
    with pytest.raises(InputError, match="holds no") as error:
        load_transfer_task(task, root)
    assert str(root / key.replace("__", "/")) in error.value.problem


def test_1_an_sts_file_with_no_pairs_is_named(tmp_path) -> None:
    root = write_sts_benchmark(tmp_path, "")
    with pytest.raises(InputError, match=r"sts-test.csv holds no scored sentence pairs"):
        load_task("STSBenchmark", root)


# ---- 2. a limit that cuts nothing is no limit -------------------------------------------------------------------
def test_2_a_limit_at_least_the_data_is_not_stamped_by_any_reader(tmp_path) -> None:
    emotion = write_emotion(tmp_path / "mteb")  # 30 test rows
    assert load_classification_set("Emotion", emotion, limit=30).limit is None
    assert load_classification_set("Emotion", emotion, limit=29).limit == 29
    cmteb = write_cmteb(tmp_path / "cmteb")  # ATEC: 7 pairs
    assert load_pair_set("ATEC", cmteb, limit=99999).limit is None and load_pair_set("ATEC", cmteb, limit=6).limit == 6
    beir = load_beir_set("toy", write_beir(tmp_path / "beir"), limit=100000, corpus_limit=10)  # 3 queries, 10 documents
    assert (beir.limit, beir.corpus_limit) == (None, None)
    beir = load_beir_set("toy", tmp_path / "beir", limit=2, corpus_limit=9)
    assert (beir.limit, beir.corpus_limit) == (2, 9)
    senteval = write_folder(tmp_path / "senteval")  # TREC: 60 training rows
    assert load_transfer_task("TREC", senteval, limit=60).limit is None
    assert load_transfer_task("TREC", senteval, limit=59).limit == 59
    sts = write_sts_benchmark(tmp_path / "sts", "".join(f"g\tc\t2012\t{i}\t{i % 5}.0\tone {i}\ttwo {i}\n" for i in range(9)))
    assert load_task("STSBenchmark", sts, limit=9).limit is None and load_task("STSBenchmark", sts, limit=8).limit == 8


def test_2_retrieval_with_a_limit_past_its_queries_is_a_full_run(tiny_llama, tmp_path, capsys) -> None:
    prefix = tmp_path / "run"
    code, err = cli(capsys, "eval", "retrieval", "--model", str(tiny_llama), "--method", "mean", "--sets", "toy",
                    "--data", str(write_beir(tmp_path / "beir")), "--limit", "100000", "--corpus-limit", "100000",
                    "--output", str(prefix), "--no-progress")
    assert code == 0, err
    saved = json.loads(prefix.with_suffix(".json").read_text())
    assert saved["stamp"]["limit"] is None and saved["results"]["corpus_limit"] is None
    assert "Limited run" not in prefix.with_suffix(".md").read_text()


# ---- 3. a checkpoint folder's tables are found by the one path rule ---------------------------------------------
def test_3_reproduce_tasks_finds_the_chosen_rows_of_a_model_named_by_its_folder(tmp_path) -> None:
    reproduce_tasks = tool("reproduce_tasks")
    by_name = reproduce_tasks.chosen_methods("smollm2-135m-instruct")  # results/smollm2-135m-instruct.json
    assert reproduce_tasks.chosen_methods(str(tmp_path / "checkpoints" / "smollm2-135m-instruct")) == by_name
    assert reproduce_tasks.chosen_methods("checkpoints/smollm2-135m-instruct/") == by_name


def test_2_3_a_table_of_a_folder_model_with_a_limit_past_its_data_merges_and_enters_the_claims(
        tiny_llama, tmp_path, monkeypatch) -> None:
    """--model as an absolute folder finds results/<folder name>.json; --limit 1000 on files of fewer rows is a full
    table, which --merge carries into another sitting's and claims_table counts."""
    reproduce_tasks = tool("reproduce_tasks")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "tiny-llama.json").write_text(json.dumps({"rows": [
        {"key": "prompteol", "method": {"method": "prompteol"}}]}))
    monkeypatch.setattr(reproduce_tasks, "REPO", tmp_path)
    common = ["--model", str(tiny_llama), "--family", "transfer", "--tasks", "SST2", "--data",
              str(write_folder(tmp_path / "senteval")), "--limit", "1000"]
    assert reproduce_tasks.main([*common, "--rows", "prompteol", "--out", str(tmp_path / "gpu")]) == 0
    assert reproduce_tasks.main([*common, "--merge", str(tmp_path / "gpu" / "tiny-llama-transfer.json"),
                                 "--out", str(tmp_path / "cpu")]) == 0
    saved = json.loads((tmp_path / "cpu" / "tiny-llama-transfer.json").read_text())
    assert saved["rows_done"] == ["prompteol"] and saved["settings"]["limit"] is None
    assert "Limited run" not in (tmp_path / "cpu" / "tiny-llama-transfer.md").read_text()
    tables, left_out = tool("claims_table").load_tables(tmp_path / "cpu")
    assert [table["benchmark"] for table in tables] == ["transfer"] and left_out == []


# ---- 5. a C-MTEB STS set whose labels are all equal -------------------------------------------------------------
def test_5_a_cmteb_set_of_equal_labels_says_why_it_has_no_score(tmp_path) -> None:
    folder = write_cmteb(tmp_path)
    (folder / "ATEC" / "ATEC.test.data").write_text("a red car\ta blue car\t1\nthe cat\ta dog\t1\none\ttwo\t1\n")
    with pytest.raises(InputError, match=r"its pairs all have the label 1, so their Spearman correlation .* undefined"):
        load_pair_set("ATEC", folder)
    (folder / "ATEC" / "ATEC.test.data").write_text("a red car\ta blue car\t1\nthe cat\ta dog\t1\none\ttwo\t0\n")
    with pytest.raises(InputError, match="the first 2 of its pairs all have the label 1") as error:
        load_pair_set("ATEC", folder, limit=2)
    assert "--limit" in error.value.fix
    assert load_pair_set("ATEC", folder).labels == [1.0, 1.0, 0.0]


# ---- red team: malformed SentEval files -------------------------------------------------------------------------
MRPC_ROWS = "".join(f"{i % 2}\t1\t2\tsentence {i} a\tsentence {i} b\n" for i in range(24))


@pytest.mark.parametrize(("key", "content", "said"), [
    ("MRPC__msr_paraphrase_train.txt", MRPC_ROWS, "line 1 is not MRPC's header"),  # its first row read as one
    ("TREC__TREC_10.label", "how far is it from denver to aspen ?\n", "line 1 is not 'COARSE:fine question'"),
    ("TREC__TREC_10.label", "NUM:dist\n", "line 1 is not 'COARSE:fine question'"),  # a label, no question
    ("SST__binary__sentiment-test", "caf\xe9 au lait\t1\n".encode("latin-1"), "line 1 is not valid utf-8"),
])
def test_red_team_malformed_senteval_files_are_named(tmp_path, key, content, said) -> None:
    root = write_folder(tmp_path, **{"MRPC__msr_paraphrase_train.txt": MRPC_HEADER + MRPC_ROWS,
                                     "MRPC__msr_paraphrase_test.txt": MRPC_HEADER + MRPC_ROWS, key: content})
    with pytest.raises(InputError, match=said) as error:
        load_transfer_task({"MRPC": "MRPC", "TREC": "TREC", "SST": "SST2"}[key.split("__")[0]], root)
    assert str(root / key.replace("__", "/")) in error.value.problem and "SHA256SUMS" in error.value.fix


def test_red_team_mrpc_with_or_without_its_bom_and_latin1_trec_read_as_senteval_does(tmp_path) -> None:
    with_bom = write_folder(tmp_path / "a", **{"MRPC__msr_paraphrase_train.txt": MRPC_HEADER + MRPC_ROWS,
                                               "MRPC__msr_paraphrase_test.txt": MRPC_HEADER + MRPC_ROWS})
    without = write_folder(tmp_path / "b", **{"MRPC__msr_paraphrase_train.txt": MRPC_HEADER[1:] + MRPC_ROWS,
                                              "MRPC__msr_paraphrase_test.txt": MRPC_HEADER[1:] + MRPC_ROWS})
    assert len(load_transfer_task("MRPC", with_bom).splits["train"]) == 24
    assert load_transfer_task("MRPC", without).splits["train"].texts == load_transfer_task("MRPC", with_bom).splits["train"].texts
    trec = "".join(f"{c}:x caf\xe9 {c.lower()} question {i} ?\n" for i in range(60) for c in ["HUM", "LOC"][i % 2:][:1])
    root = write_folder(tmp_path / "c", **{"TREC__train_5500.label": trec.encode("latin-1")})
    assert "café hum question 0 ?" in load_transfer_task("TREC", root).splits["train"].texts  # SentEval reads latin-1


def test_2_a_kept_retrieval_row_whose_limit_cut_nothing_joins_the_run_that_asks_for_it(tmp_path) -> None:
    """The row's stamp says the data was whole (limit None); its command says --limit 100000: the same run, resumed,
    takes the row; a run asking for another limit is still refused."""
    import argparse

    reproduce_retrieval = tool("reproduce_retrieval")
    stamp = {"model": "tiny-llama", "dtype": "float32", "limit": None, "corpus_limit": None,
             "command": "minidecoder eval retrieval --model tiny-llama --method mean --limit 100000"}
    asked = argparse.Namespace(model="tiny-llama", dtype="float32", limit=100000, corpus_limit=None, out=tmp_path)
    argv = ["eval", "retrieval", "--model", "tiny-llama", "--method", "mean", "--limit", "100000"]
    reproduce_retrieval.refuse_other_settings("mean", stamp, asked, argv)
    with pytest.raises(SystemExit, match=r"limit 100000 \(this run: 20\)"):
        reproduce_retrieval.refuse_other_settings("mean", stamp, argparse.Namespace(**{**vars(asked), "limit": 20}),
                                                  argv[:-1] + ["20"])


def test_a_kept_row_of_other_tasks_is_refused_not_compared(tmp_path) -> None:
    """Found: a row kept from a run with `--sets scifact` joined a run of every set: its table compared rows
    scored on other sets, and its claims file was marked full. A set named by default or in another order is
    the same set."""
    import argparse

    reproduce_retrieval = tool("reproduce_retrieval")
    stamp = {"model": "tiny-llama", "dtype": "float32", "limit": None, "corpus_limit": None,
             "command": "minidecoder eval retrieval --model tiny-llama --method mean --sets scifact"}
    asked = argparse.Namespace(model="tiny-llama", dtype="float32", limit=None, corpus_limit=None, out=tmp_path)
    argv = ["eval", "retrieval", "--model", "tiny-llama", "--method", "mean"]
    with pytest.raises(SystemExit, match=r"tasks 'scifact' \(this run: 'nfcorpus,scifact'\)"):
        reproduce_retrieval.refuse_other_settings("mean", stamp, asked, argv)
    reproduce_retrieval.refuse_other_settings("mean", stamp, asked, argv + ["--sets", "scifact"])
    stamp["command"] = stamp["command"].replace("--sets scifact", "--sets scifact,nfcorpus")  # the default, named
    reproduce_retrieval.refuse_other_settings("mean", stamp, asked, argv)
    stamp["command"] = "minidecoder eval classification --model tiny-llama --method mean --tasks Emotion"
    with pytest.raises(SystemExit, match=r"tasks 'Emotion' \(this run: 'Banking77,Emotion'\)"):
        reproduce_retrieval.refuse_other_settings("mean", stamp, asked, ["eval", "classification", "--model",
                                                                         "tiny-llama", "--method", "mean"])
