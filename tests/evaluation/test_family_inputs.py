"""What the eval families say of edited data, and of a resume with other settings (docs/reliability.md rows
67-71): a label list of another JSON type, a line number past a blank line, a C-MTEB set of one pair, a BEIR
split that does not exist, and a refused resume that rewrote the kept work's owner record. Each test fails on
the code before its fix."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from minidecoder.errors import InputError
from minidecoder.evaluation.classification import load_classification_set
from minidecoder.evaluation.cmteb import load_pair_set
from minidecoder.evaluation.retrieval import load_beir_set
from minidecoder.evaluation.sts import load_task
from minidecoder.evaluation.sts_long import load_long_sts
from minidecoder.evaluation.transfer import load_transfer_task
from cli_runner import cli
from test_classification import write_emotion
from test_cmteb import write_cmteb
from test_eval_data_faults import NO_MODEL, write_banking
from test_retrieval import write_beir
from test_sts_data import DATA, needs_data


@pytest.mark.parametrize("content, kind", [("77", "int"), ('"abc"', "str"), ('{"age_limit": 1}', "dict")])
def test_a_label_list_of_another_json_type_is_named_before_the_model_loads(tmp_path, capsys, content, kind) -> None:
    """77 ended in a TypeError traceback; a string was read as its letters, an object as its keys."""
    folder = write_banking(tmp_path / "mteb")
    (folder / "Banking77" / "categories.json").write_text(content)
    with pytest.raises(InputError, match=f"categories.json holds a JSON {kind}, not a list of label names"):
        load_classification_set("Banking77", folder)
    code, err = cli(capsys, "eval", "classification", "--method", "mean", "--tasks", "Banking77", "--data",
                    str(folder), "--output", str(tmp_path / "out"), "--model", NO_MODEL)
    assert code == 2 and "not a list of label names" in err and "Traceback" not in err, err


def test_a_banking77_line_past_a_blank_line_is_named_by_its_own_number(tmp_path) -> None:
    folder = write_banking(tmp_path / "mteb", "text,category\nhow old must i be,age_limit\n\nwhere is it,no_such\n")
    with pytest.raises(InputError, match=r"test\.csv line 4: label 'no_such' is not one"):  # was line 3
        load_classification_set("Banking77", folder)


def test_a_cmteb_set_of_one_pair_is_refused_before_the_model_loads(tmp_path, capsys) -> None:
    """mteb's pair classification reads a split of one row as its batched format and failed in pyarrow."""
    folder = write_cmteb(tmp_path / "cmteb")
    with pytest.raises(InputError, match=r"--limit 1 keeps one scored pair; a score needs at least two"):
        load_pair_set("Ocnli", folder, limit=1)
    code, err = cli(capsys, "eval", "cmteb", "--method", "mean", "--tasks", "Ocnli", "--limit", "1", "--data",
                    str(folder), "--output", str(tmp_path / "out"), "--model", NO_MODEL)
    assert code == 2 and "a score needs at least two" in err, err


def test_a_classification_limit_of_one_test_item_is_refused_before_the_model_loads(tmp_path, capsys) -> None:
    """`eval classification --limit 1` was scored from one test item, its 95% interval [x, x] that one point; a
    test file of one item likewise."""
    folder = write_emotion(tmp_path / "mteb")
    with pytest.raises(InputError, match=r"test\.txt: --limit \(limit=\) 1 keeps 1 test item\(s\); an accuracy and its 95% "
                                         r"interval \(a bootstrap over test items\) need at least two") as error:
        load_classification_set("Emotion", folder, limit=1)
    assert "--limit of 2 or more" in error.value.fix
    assert len(load_classification_set("Emotion", folder, limit=2).splits["test"][0]) == 2
    code, err = cli(capsys, "eval", "classification", "--method", "mean", "--tasks", "Emotion", "--limit", "1",
                    "--data", str(folder), "--output", str(tmp_path / "out"), "--model", NO_MODEL)
    assert code == 2 and "--limit (limit=) 1 keeps 1 test item(s)" in err and NO_MODEL not in err, err
    with pytest.raises(InputError, match=r"limit=0 \(--limit 0\) must be at least 1"):  # from Python too
        load_classification_set("Emotion", folder, limit=0)
    write_banking(folder)  # a test.csv of one item
    with pytest.raises(InputError, match=r"test\.csv: it holds 1 test item\(s\)") as error:
        load_classification_set("Banking77", folder)
    assert error.value.fix == "restore the file"


def test_a_beir_split_that_does_not_exist_names_split_and_the_ones_there(tmp_path) -> None:
    folder = write_beir(tmp_path / "beir")
    with pytest.raises(InputError, match="BEIR set 'toy' has no 'dev' split") as error:
        load_beir_set("toy", folder, split="dev")
    assert error.value.fix == "choose --split test"


def test_a_refused_resume_keeps_the_record_of_the_command_that_made_the_work(tiny_llama: Path, tmp_path: Path,
                                                                           capsys) -> None:
    """A sweep resumed with other --layers was refused after the model loaded, by job fields, and rewrote the
    kept work's owner record: the next refusal advised a command (the refused one) that cannot resume it."""
    from repo_paths import SHARED

    data = SHARED / "data" / "sts"
    if not (data / "STSBenchmark" / "sts-dev.csv").is_file():
        pytest.skip("STS data not found")
    prefix = tmp_path / "s"
    argv = ["sweep", "--model", str(tiny_llama), "--method", "prompteol", "--limit", "200", "--batch-size", "8",
            "--data", str(data), "--no-progress", "--output", str(prefix)]
    run = subprocess.Popen([sys.executable, "-m", "minidecoder", *argv, "--layers", "all"], stderr=subprocess.PIPE,
                           text=True)
    work = tmp_path / ".s.json.partial"
    deadline = time.monotonic() + 120
    while not list(work.rglob("chunk-*.npy")) and time.monotonic() < deadline and run.poll() is None:
        time.sleep(0.2)
    run.send_signal(signal.SIGINT)
    run.communicate(timeout=120)
    if not list(work.rglob("chunk-*.npy")):
        pytest.skip("the sweep finished before it could be interrupted")
    made_it = json.loads((work / "owner.json").read_text())["command_line"]
    assert "--layers all" in made_it
    code, err = cli(capsys, *argv, "--layers", "1,2", "--model", NO_MODEL)  # refused by flag, before the model loads
    assert code == 2 and "--layers was 'all', now '1,2'" in err, err
    assert json.loads((work / "owner.json").read_text())["command_line"] == made_it


@pytest.mark.parametrize("family, method, instruction", [("retrieval", "prompteol", "auto"),
                                                         ("classification", "mean", "none")])
def test_a_pooled_placement_with_no_instruction_is_refused_before_the_model_loads(tmp_path, capsys, family, method,
                                                                                instruction) -> None:
    """Found: `--instruction-placement pooled` was stamped and changed nothing where the run gives no instruction
    (a prompt method under --instruction auto, or --instruction none)."""
    code, err = cli(capsys, "eval", family, "--method", method, "--instruction", instruction,
                    "--instruction-placement", "pooled", "--model", "no-such-model-folder",
                    "--output", str(tmp_path / "r"))
    assert code == 2 and "--instruction-placement pooled places the task's instruction" in err, err
    assert "no-such-model-folder" not in err  # refused before the model (or the data) is read


@pytest.mark.parametrize("family, flag, names", [("retrieval", "--sets", "scifact,scifact"),
                                                 ("cmteb", "--tasks", "ATEC,BQ,ATEC"),
                                                 ("classification", "--tasks", "Emotion,Emotion"),
                                                 ("sts", "--tasks", "STS12,STS12"), ("transfer", "--tasks", "MR,MR")])
def test_a_name_given_twice_is_refused_before_the_model_loads(tmp_path, capsys, family, flag, names) -> None:
    """Found: `--sets scifact,scifact` and `--tasks ATEC,ATEC` were scored once, in one column, with the data
    files listed twice in the stamp (sts and transfer refused it, in their loaders)."""
    twice = names.split(",")[0]
    code, err = cli(capsys, "eval", family, "--method", "mean", flag, names, "--model", NO_MODEL,
                    "--output", str(tmp_path / "r"))
    assert code == 2 and f"{flag} names {twice} twice" in err and NO_MODEL not in err, err


@pytest.mark.parametrize("instruction", ["   ", ""])
def test_a_blank_instruction_is_named_by_its_flag_before_the_model_loads(tmp_path, capsys, instruction) -> None:
    """Found: `--instruction "   "` failed after the model loaded, as "the context of text 5 is whitespace-only"."""
    code, err = cli(capsys, "eval", "retrieval", "--method", "mean", "--instruction", instruction, "--model", NO_MODEL,
                    "--output", str(tmp_path / "r"))
    assert code == 2 and f"--instruction {instruction!r} is empty or whitespace-only" in err and NO_MODEL not in err, err


LOADERS = {  # each family's reader, called from Python as a notebook would
    "sts": lambda folder, **limits: load_task("STS12", folder, **limits),
    "sts-long": lambda folder, **limits: load_long_sts(folder, **limits),
    "transfer": lambda folder, **limits: load_transfer_task("MR", folder, **limits),
    "retrieval": lambda folder, **limits: load_beir_set("scifact", folder, **limits),
    "classification": lambda folder, **limits: load_classification_set("Emotion", folder, **limits),
    "cmteb": lambda folder, **limits: load_pair_set("ATEC", folder, **limits),
}


@pytest.mark.parametrize("family", list(LOADERS))
@pytest.mark.parametrize("limit, said", [(-1, r"must be at least|is too small"), (2.5, "is not a whole number"),
                                         ("10", "is not a whole number"), (True, "is not a whole number")])
def test_a_limit_from_python_is_checked_before_the_data_is_read(tmp_path, family, limit, said) -> None:
    """Found: from Python, `load_transfer_task("MR", limit=-1)` and `load_beir_set(..., limit=-1)` kept all but the
    last row or query (`rows[:-1]`), silently; 2.5 or "10" failed inside a slice. Every reader now checks its
    limit as the CLI checks --limit, before it looks for its files (the folder here does not exist)."""
    with pytest.raises(InputError, match=said):
        LOADERS[family](tmp_path / "nowhere", limit=limit)
    if family == "retrieval":
        with pytest.raises(InputError, match=r"corpus_limit=-1 \(--corpus-limit -1\) must be at least 0"):
            LOADERS[family](tmp_path / "nowhere", corpus_limit=-1)


def test_a_numpy_limit_is_a_limit_stamped_as_a_python_int(tmp_path) -> None:
    import numpy as np

    folder = write_emotion(tmp_path / "mteb")
    data = load_classification_set("Emotion", folder, limit=np.int64(2))
    assert len(data.splits["test"][0]) == 2 and type(data.limit) is int


@needs_data
def test_sts_long_takes_numpy_lengths_and_refuses_a_bool_among_them() -> None:
    """`load_long_sts(lengths=np.array([1, 4]))` failed on the array's ambiguous truth value, and a NumPy length
    was refused as "not an integer"; True, an int to Python, is no length."""
    import numpy as np

    task, sets = load_long_sts(DATA, 40, np.array([1, 4]))
    assert [pairs.k for pairs in sets] == [1, 4] and all(type(pairs.k) is int for pairs in sets)
    for bad in ((True, 2), np.array([0, 1]), ()):
        with pytest.raises(InputError, match="must be distinct positive integers"):
            load_long_sts(DATA, 40, bad)


def test_is_whole_number_takes_numpy_integers_and_refuses_bools_floats_and_texts() -> None:
    import numpy as np

    from minidecoder.errors import is_whole_number

    assert all(is_whole_number(v) for v in (0, -3, 7, np.int64(5), np.uint8(2)))
    assert not any(is_whole_number(v) for v in (True, np.bool_(True), 2.0, np.float64(2), "3", None))
    assert is_whole_number(1, 1) and is_whole_number(np.int32(0), 0)
    assert not is_whole_number(0, 1) and not is_whole_number(np.int64(-1), 0)



def test_a_chunk_size_or_top_k_from_python_is_checked(tmp_path) -> None:
    """Found: `evaluate_sts(..., chunk_size=0)` failed inside `range`, -1 encoded nothing and then failed on a
    (0, 0) table, 2.5 was a TypeError; `evaluate_retrieval(..., top_k=0)` scored every query 0, silently, and
    -5 failed inside torch.topk."""
    import numpy as np
    import torch

    from minidecoder.errors import ArgumentTypeError
    from minidecoder.evaluation.family import encode_sentences
    from minidecoder.evaluation.retrieval import evaluate_retrieval

    encode = lambda texts: torch.ones(len(texts), 4)  # noqa: E731
    for bad in (0, -1, 2.5, "8", True):
        with pytest.raises(ArgumentTypeError, match=r"chunk_size=.* must be a positive whole number of sentences"):
            encode_sentences(encode, ["a", "b", "c"], chunk_size=bad, progress=False)
    assert encode_sentences(encode, ["a", "b", "c"], chunk_size=np.int64(2), progress=False).shape == (3, 4)
    data = load_beir_set("toy", write_beir(tmp_path / "beir"))
    for bad in (0, -5, 2.5):
        with pytest.raises(ArgumentTypeError, match=r"top_k=.* must be a positive whole number of documents"):
            evaluate_retrieval(encode, data, progress=False, top_k=bad)


def test_reading_options_beside_data_read_already_are_refused(tmp_path) -> None:
    """Found: `evaluate_sts(encode, load_tasks([...]), limit=50)` scored every pair: a limit (or data folder, or
    sts-long's lengths) given beside tasks read already was ignored without a word."""
    import torch

    from minidecoder.evaluation.sts import StsSubset, StsTask, evaluate_sts
    from minidecoder.evaluation.sts_long import evaluate_sts_long
    from minidecoder.evaluation.transfer import TransferTask, evaluate_transfer

    encode = lambda texts: torch.ones(len(texts), 4)  # noqa: E731
    sts = StsTask("STSBenchmark", "test", {"test": StsSubset("test", ["a b", "c"], ["d", "e f"], [1.0, 2.0])}, tmp_path)
    with pytest.raises(InputError, match=r"evaluate_sts was given data read already and limit, which only say how"):
        evaluate_sts(encode, [sts], limit=50, progress=False)
    with pytest.raises(InputError, match=r"and data_dir, limit, which only") as error:
        evaluate_transfer(encode, [TransferTask("MR", "kfold", ("0", "1"), {}, tmp_path, [], None)],
                          data_dir=tmp_path, limit=5)
    assert "load_transfer_tasks(names, data_dir, limit)" in error.value.fix
    with pytest.raises(InputError, match=r"evaluate_sts_long was given data read already and lengths"):
        evaluate_sts_long(encode, lengths=(1, 2), loaded=(sts, []), progress=False)
