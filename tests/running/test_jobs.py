"""`minidecoder.running.jobs.run_embedding_job`: streamed, chunked, resumable, never clobbers output.

The central test kills a real job (a subprocess) with SIGKILL once its first chunk is on disk,
resumes it, and compares the output byte for byte with an uninterrupted run.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import tracemalloc
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import minidecoder
from minidecoder.errors import InputError
from minidecoder.running.jobs import load_metadata, run_embedding_job
from minidecoder.methods.base import Method
from repo_paths import REPO



@pytest.fixture(scope="module")
def folder(tiny_llama: Path) -> Path:
    return tiny_llama


@pytest.fixture(scope="module")
def model(folder: Path):
    return minidecoder.load(folder)


def write_lines(path: Path, count: int, start: int = 0) -> Path:
    with path.open("w", encoding="utf-8") as handle:
        for i in range(start, start + count):
            handle.write(f"sentence {i}: {'a cat sat' if i % 3 else 'the dogs ran far away'} ({'x' * (i % 7)})\n")
    return path


class Stop(Exception):
    pass


def interrupt_after(chunks: int):
    """A progress callback that raises KeyboardInterrupt after `chunks` chunks (a Ctrl-C stand-in)."""
    calls = []

    def progress(done: int, total: int) -> None:
        calls.append(done)
        if len(calls) == chunks:
            raise KeyboardInterrupt
    return progress


# ---- kill -9 and resume ----------------------------------------------------------------------------------
JOB_SCRIPT = """
import json, sys
import minidecoder
from minidecoder.running.jobs import run_embedding_job
model = minidecoder.load(sys.argv[1])
print(json.dumps(run_embedding_job(model, "prompteol", sys.argv[2], sys.argv[3], chunk_size=int(sys.argv[4]),
                                   batch_size=8)))
"""


def run_job(folder: Path, source: Path, output: Path, chunk_size: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-c", JOB_SCRIPT, str(folder), str(source), str(output), str(chunk_size)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)


def test_job_killed_with_sigkill_resumes_to_byte_identical_output(folder: Path, tmp_path: Path) -> None:
    source = write_lines(tmp_path / "in.txt", 240)
    chunk_size = 20  # 12 chunks

    reference = run_job(folder, source, tmp_path / "reference.npy", chunk_size)
    out, err = reference.communicate(timeout=300)
    assert reference.returncode == 0, err

    output = tmp_path / "resumed.npy"
    work = tmp_path / ".resumed.npy.partial"
    job = run_job(folder, source, output, chunk_size)
    deadline = time.monotonic() + 120
    while not (work / "chunk-000000.npy").exists():
        assert job.poll() is None, job.communicate()[1]
        assert time.monotonic() < deadline, "the job wrote no chunk in 120 s"
        time.sleep(0.005)
    job.send_signal(signal.SIGKILL)
    job.wait(timeout=30)
    assert job.returncode == -signal.SIGKILL
    done = sorted(p.name for p in work.glob("chunk-*.npy"))
    assert not output.exists() and 1 <= len(done) < 12, done  # really interrupted mid-way

    resumed = run_job(folder, source, output, chunk_size)
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["chunks_reused"] == len(done) and summary["chunks_computed"] == 12 - len(done)
    assert output.read_bytes() == (tmp_path / "reference.npy").read_bytes()
    assert not work.exists()  # the work folder is removed once the output is in place


# ---- Ctrl-C, changed settings, overwrite -----------------------------------------------------------------
def test_interrupted_job_resumes_and_refuses_other_settings(model, tmp_path: Path) -> None:
    source = write_lines(tmp_path / "in.txt", 30)
    output = tmp_path / "out.npy"
    with pytest.raises(KeyboardInterrupt):
        run_embedding_job(model, "mean", source, output, chunk_size=10, batch_size=4, progress=interrupt_after(1))
    assert not output.exists() and (tmp_path / ".out.npy.partial" / "chunk-000000.npy").exists()

    with pytest.raises(InputError) as refused:
        run_embedding_job(model, "mean", source, output, chunk_size=10, batch_size=4, layer=2)
    assert "--opt layer was -1, now 2" in refused.value.problem and "delete" in refused.value.fix
    with pytest.raises(InputError, match="the chunk size was 10, now 5"):
        run_embedding_job(model, "mean", source, output, chunk_size=5, batch_size=4)
    with pytest.raises(InputError, match="--batch-size was 4, now 8"):
        run_embedding_job(model, "mean", source, output, chunk_size=10, batch_size=8)
    plain = model.fast_paths  # padded buckets round differently: chunks of both must never mix
    try:
        model.fast_paths = dataclasses.replace(plain, buckets=True)
        with pytest.raises(InputError, match=r"the fast paths \(--compile, --pack-weights, --graphs\) differ.*buckets was None, now True"):
            run_embedding_job(model, "mean", source, output, chunk_size=10, batch_size=4)
    finally:
        model.fast_paths = plain
    write_lines(source, 30, start=1)  # same length, other content
    with pytest.raises(InputError, match=r"the texts to embed \(the input file, or the flags that choose the data\) differs"):
        run_embedding_job(model, "mean", source, output, chunk_size=10, batch_size=4)
    write_lines(source, 30)

    summary = run_embedding_job(model, "mean", source, output, chunk_size=10, batch_size=4)
    assert (summary["chunks_reused"], summary["chunks_computed"]) == (1, 2)
    fresh = run_embedding_job(model, "mean", source, tmp_path / "fresh.npy", chunk_size=10, batch_size=4)
    assert fresh["chunks_reused"] == 0
    assert output.read_bytes() == (tmp_path / "fresh.npy").read_bytes()
    expected = minidecoder.embed(model, source.read_text().splitlines()[:10], "mean", batch_size=4)
    assert np.array_equal(np.load(output)[:10], expected.numpy())


def test_work_kept_before_an_option_was_added_resumes_while_that_option_keeps_its_default(model, tmp_path: Path) -> None:
    """An option added since (`pieces`) computes at its default what the version that kept the work did: its
    manifest, which lacks the option, still serves; the option set otherwise does not."""
    source = write_lines(tmp_path / "in.txt", 30)
    output = tmp_path / "out.npy"
    with pytest.raises(KeyboardInterrupt):
        run_embedding_job(model, "last", source, output, chunk_size=10, batch_size=4, progress=interrupt_after(1))
    manifest_path = tmp_path / ".out.npy.partial" / "manifest.json"
    kept = json.loads(manifest_path.read_text())
    assert kept["method"].pop("pieces") is False  # as a minidecoder without the option wrote it
    manifest_path.write_text(json.dumps(kept, indent=2, sort_keys=True))
    with pytest.raises(InputError, match="--opt pieces was '\\(absent\\)', now True"):
        run_embedding_job(model, "last", source, output, chunk_size=10, batch_size=4, pieces=True)
    summary = run_embedding_job(model, "last", source, output, chunk_size=10, batch_size=4)
    assert (summary["chunks_reused"], summary["chunks_computed"]) == (1, 2)


def test_existing_output_is_never_overwritten_without_overwrite(model, tmp_path: Path) -> None:
    source = write_lines(tmp_path / "in.txt", 5)
    output = tmp_path / "out.safetensors"
    output.write_bytes(b"precious")
    with pytest.raises(InputError) as refused:
        run_embedding_job(model, "mean", source, output)
    assert "already exists" in refused.value.problem and "overwrite" in refused.value.fix
    assert output.read_bytes() == b"precious"
    run_embedding_job(model, "mean", source, output, overwrite=True)
    from safetensors.numpy import load_file
    vectors = load_file(output)["embeddings"]
    assert vectors.shape == (5, model.config.hidden_size)
    metadata = load_metadata(output)
    assert metadata["method"]["method"] == "mean" and metadata["rows"] == 5
    assert metadata["input"]["sha256"] == hashlib.sha256(source.read_bytes()).hexdigest()
    assert metadata["model"]["config_sha256"] and metadata["dtype"] == "float32"


# ---- damaged kept chunks --------------------------------------------------------------------------------
def _wider(path: Path) -> None:
    array = np.load(path)
    np.save(path, np.hstack([array, array[:, :1]]))


def _one_row_nan(path: Path) -> None:
    array = np.load(path)
    array[0] = np.nan
    np.save(path, array)


DAMAGE = [  # what a full disk, a crash, a hand edit or a copy between machines leaves of chunk 1 (rows 4-7)
    ("npy empty", lambda p: p.write_bytes(b""), "chunk 1 .* is unreadable"),
    ("one row short", lambda p: np.save(p, np.load(p)[:-1]), r"chunk 1 .* holds float32 of shape \(3, 32\), not "
                                                            r"the float32 of shape \(4, 32\)"),
    ("one column wider", _wider, r"shape \(4, 33\), not the float32 of shape \(4, 32\)"),
    ("float64", lambda p: np.save(p, np.load(p).astype(np.float64)), "holds float64 of shape"),
    ("int", lambda p: np.save(p, np.load(p).astype(np.int64)), "holds int64 of shape"),
    ("NaN row", _one_row_nan, "chunk 1 .* holds NaN or inf"),
    ("record missing", lambda p: p.with_suffix(".json").unlink(), "chunk 1 .* has an unreadable record"),
    ("record empty", lambda p: p.with_suffix(".json").write_text(""), "chunk 1 .* has an unreadable record"),
    ("record a list", lambda p: p.with_suffix(".json").write_text("[]"), "without a valid 'truncated_rows'"),
    ("record without cuts", lambda p: p.with_suffix(".json").write_text('{"rows": 4}'),
     "without a valid 'truncated_rows'"),
    ("record cuts a row that is none of its rows", lambda p: p.with_suffix(".json").write_text(
        '{"rows": 4, "truncated_rows": {"abc": 9}}'), "naming a truncated row 'abc': 9 that is not one of its rows 4-7"),
]


@pytest.mark.parametrize("damage, said", [case[1:] for case in DAMAGE], ids=[case[0] for case in DAMAGE])
def test_a_damaged_kept_chunk_is_named_never_stitched_in(model, tmp_path: Path, damage, said: str) -> None:
    """A kept chunk is read back only if it is what the job writes: a float32 (rows, E) array of finite values
    and a record of its cuts. Before, a chunk one column wider (or one row short, the next one row long) was
    stitched into a wrong output, a float64 or int one cast, a NaN one kept, and a damaged record was a
    traceback. Each is named with the one chunk to delete; deleting it recomputes it alone, to the same bytes."""
    source = write_lines(tmp_path / "in.txt", 10)
    clean = run_embedding_job(model, "prompteol", source, tmp_path / "clean.npy", chunk_size=4, batch_size=4)
    output = tmp_path / "out.npy"
    with pytest.raises(KeyboardInterrupt):  # all three chunks kept, the output never assembled
        run_embedding_job(model, "prompteol", source, output, chunk_size=4, batch_size=4, progress=interrupt_after(3))
    chunk = tmp_path / ".out.npy.partial" / "chunk-000001.npy"
    damage(chunk)
    with pytest.raises(minidecoder.MinidecoderError, match=said) as refused:
        run_embedding_job(model, "prompteol", source, output, chunk_size=4, batch_size=4)
    assert refused.value.fix == f"delete {chunk} and rerun to recompute it"
    assert not output.exists()
    chunk.unlink()
    summary = run_embedding_job(model, "prompteol", source, output, chunk_size=4, batch_size=4)
    assert (summary["chunks_reused"], summary["chunks_computed"]) == (2, 1) and clean["chunks_computed"] == 3
    assert output.read_bytes() == (tmp_path / "clean.npy").read_bytes()


def test_kept_chunks_without_their_manifest_are_refused_not_adopted(model, tmp_path: Path) -> None:
    """The manifest is written before any chunk, so chunks without one were kept under settings no one can tell:
    a run used to write its own manifest over them and stitch in another method's vectors."""
    source = write_lines(tmp_path / "in.txt", 10)
    output = tmp_path / "out.npy"
    with pytest.raises(KeyboardInterrupt):
        run_embedding_job(model, "mean", source, output, chunk_size=4, batch_size=4, progress=interrupt_after(1))
    work = tmp_path / ".out.npy.partial"
    (work / "manifest.json").unlink()
    with pytest.raises(InputError) as refused:
        run_embedding_job(model, "prompteol", source, output, chunk_size=4, batch_size=4)
    assert str(refused.value) == (f"{work} holds finished chunks but no manifest.json saying what they were computed "
                                  f"with, so they cannot be resumed\n  fix: delete {work} to start over")
    assert not output.exists() and (work / "chunk-000000.npy").is_file()  # the kept chunk is left to the user


@pytest.mark.parametrize("suffix", [".npy", ".json"])
def test_a_folder_where_a_chunk_file_belongs_is_named_as_the_way_out(model, tmp_path: Path, suffix: str) -> None:
    """A folder in a chunk file's place (a copy gone wrong) fails the chunk's final rename. The message used to
    say only "Is a directory" and advise freeing space; it names the folder, whose removal lets the job resume."""
    source = write_lines(tmp_path / "in.txt", 10)
    output = tmp_path / "out.npy"
    with pytest.raises(KeyboardInterrupt):
        run_embedding_job(model, "mean", source, output, chunk_size=4, batch_size=4, progress=interrupt_after(1))
    in_the_way = tmp_path / ".out.npy.partial" / f"chunk-000001{suffix}"
    in_the_way.mkdir()
    with pytest.raises(minidecoder.MinidecoderError) as refused:
        run_embedding_job(model, "mean", source, output, chunk_size=4, batch_size=4)
    assert f"({in_the_way}); the 1 finished chunk(s) of 3 are kept" in refused.value.problem
    assert refused.value.fix.startswith(f"remove the folder {in_the_way}, then run the same command again")
    in_the_way.rmdir()
    assert run_embedding_job(model, "mean", source, output, chunk_size=4, batch_size=4)["chunks_reused"] == 1


# ---- input problems --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, content, problem", [
    ("bad.txt", b"fine\n\xff\xfe broken\n", "line 2 is not valid UTF-8"),
    ("blank.txt", b"one\n   \nthree\n", "line 2 is empty or whitespace-only"),
    ("empty.txt", b"", "has no rows"),
    ("nojson.jsonl", b'{"text": "ok"}\nnot json\n', "line 2 is not JSON"),
    ("notext.jsonl", b'{"text": "ok"}\n{"sentence": "x"}\n', 'line 2 has no string "text" field'),
])
def test_bad_input_files_name_the_line(model, tmp_path: Path, name: str, content: bytes, problem: str) -> None:
    source = tmp_path / name
    source.write_bytes(content)
    with pytest.raises(InputError, match=problem):
        run_embedding_job(model, "mean", source, tmp_path / "out.npy")
    assert not (tmp_path / "out.npy").exists()


def test_a_utf16_file_is_named_with_the_encoding_to_convert_from(model, tmp_path: Path) -> None:
    """Windows PowerShell's `>` writes UTF-16 with a byte order mark; the fix used to suggest converting from
    latin1, which turns every character into two."""
    source = tmp_path / "in.txt"
    source.write_bytes("a cat sat.\n".encode("utf-16"))
    with pytest.raises(InputError) as refused:
        run_embedding_job(model, "mean", source, tmp_path / "out.npy")
    assert "line 1 is not valid UTF-8" in refused.value.problem and "UTF-16 byte order mark" in refused.value.problem
    assert "iconv -f utf-16 -t utf-8" in refused.value.fix


def test_an_explicit_empty_jsonl_text_is_embedded_by_a_prompt_method_and_refused_by_a_pooling(model, tmp_path: Path) -> None:
    """{"text": ""} is the empty text a prompt read at its last token embeds (SentEval's blank lines, as the
    transfer tables read them); a blank line of a .txt file stays an error (more often a slip than a sample)."""
    source = tmp_path / "in.jsonl"
    texts = ["a cat sat.", "", "dogs run."]
    source.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    run_embedding_job(model, "prompteol", source, tmp_path / "out.npy", chunk_size=2)
    assert np.allclose(np.load(tmp_path / "out.npy"), minidecoder.embed(model, texts, "prompteol").numpy(), atol=1e-5)
    with pytest.raises(InputError, match=r"in.jsonl line 2 is the empty text .* method 'mean' pools"):
        run_embedding_job(model, "mean", source, tmp_path / "mean.npy")
    assert not (tmp_path / "mean.npy").exists()
    source.write_text(json.dumps({"text": " "}) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match="line 1 is empty or whitespace-only"):
        run_embedding_job(model, "prompteol", source, tmp_path / "space.npy")


def test_jsonl_input_and_truncation_recorded_in_metadata(model, tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    texts = ["short one", "mid length", "a much longer text that will be cut"]
    source.write_text("".join(json.dumps({"text": t, "id": i}) + "\n" for i, t in enumerate(texts)), encoding="utf-8")
    output = tmp_path / "out.npy"
    # one warning for the job, naming the input's line (the cut row is row 0 of the second chunk)
    with pytest.warns(UserWarning, match=r"truncate=10: 1 of 3 texts were cut .*in\.jsonl line 3\)") as said:
        summary = run_embedding_job(model, "mean", source, output, chunk_size=2, truncate=10)
    assert len([w for w in said if "truncate=10" in str(w.message)]) == 1
    assert summary["truncated_rows"] == 1
    metadata = load_metadata(output)
    assert metadata["truncate"] == 10
    assert metadata["truncated_rows"] == {"2": len(texts[2])}  # the tiny tokenizer: one token per character
    cut = minidecoder.embed(model, [texts[2][:10]], "mean")
    # row 2 is the embedding of its first 10 tokens (alone here, padded in the job's batch: float tolerance)
    assert np.allclose(np.load(output)[2], cut[0].numpy(), atol=1e-5)


@pytest.mark.parametrize("method, limit, line, said", [
    ("mean", 40, "x" * 60, r"in\.txt line 6 is 60 tokens, longer than the model's context of 40 tokens: 'xxx"),
    ("prompteol", 60, "y" * 30, r"in\.txt line 6 is 30 tokens; with method prompteol's prompt .* longer than the model's "
                                r"context of 60 tokens: 'yyy"),
], ids=["the text alone", "inside the prompt"])
def test_a_text_past_the_context_in_a_later_chunk_is_named_by_its_line_before_any_chunk(
        model, tmp_path: Path, monkeypatch, method: str, limit: int, line: str, said: str) -> None:
    """Found only when its chunk came, a text too long stopped the job with its row in that chunk ("text 1"),
    after the earlier chunks were kept without truncation, so the rerun the error advised (--truncate N) was
    refused as other settings."""
    from minidecoder.errors import ContextLengthError

    monkeypatch.setattr(model, "max_context", limit)
    source = tmp_path / "in.txt"
    source.write_text("".join(f"s{i}\n" if i != 5 else line + "\n" for i in range(7)), encoding="utf-8")
    output = tmp_path / "out.npy"
    with pytest.raises(ContextLengthError, match=said) as refused:
        run_embedding_job(model, method, source, output, chunk_size=2)
    assert not (tmp_path / ".out.npy.partial").exists()  # no chunk computed, nothing kept to contradict the fix
    fits = int(refused.value.fix.split("truncate=")[1].split()[0])
    with pytest.warns(UserWarning, match=rf"truncate={fits}: 1 of 7 texts were cut .*in\.txt line 6\)"):
        assert run_embedding_job(model, method, source, output, chunk_size=2, truncate=fits)["rows"] == 7


def test_an_eval_jobs_cuts_are_counted_without_its_own_files_lines(model, tmp_path: Path) -> None:
    """embed_resumably (the eval commands' job) writes its texts to a file of its own: a warning naming that
    file's lines would tell the user nothing, so it says how many texts were cut. The job's own warning is
    silenced by its category, never by matching its words."""
    from minidecoder.errors import TruncationWarning
    from minidecoder.running.jobs import embed_resumably

    with pytest.warns(TruncationWarning) as said:
        vectors, summary = embed_resumably(model, "mean", ["short", "y" * 40, "z" * 30], tmp_path / "work", truncate=10)
    assert vectors.shape == (3, 32) and summary["truncated_rows"] == 2
    assert [str(w.message) for w in said] == ["truncate=10: 2 of 3 texts were cut to their first 10 tokens"]


def test_a_kept_table_is_read_back_with_its_cuts_and_refused_under_other_settings(model, tmp_path: Path,
                                                                                  monkeypatch) -> None:
    """keep=True (the eval commands, until their report is written): the finished table stays, counted as kept
    work; the same call reads it back, cuts said again, without embedding; other settings are refused by name."""
    import minidecoder.running.embedding as embedding
    from minidecoder.running.jobs import embed_resumably, holds_kept_work

    texts, work = ["short", "y" * 40, "z" * 30], tmp_path / "work"
    with pytest.warns(UserWarning, match="2 of 3 texts were cut"):
        first, made = embed_resumably(model, "mean", texts, work, truncate=10, keep=True)
    assert holds_kept_work(work) and made["chunks_computed"] == 1
    monkeypatch.setattr(embedding, "embed_rows", lambda *args, **kwargs: pytest.fail("embedded again"))
    with pytest.warns(UserWarning, match="2 of 3 texts were cut"):
        again, reused = embed_resumably(model, "mean", texts, work, truncate=10, keep=True)
    assert torch.equal(again, first) and reused["chunks_reused"] == 1 and reused["truncated_rows"] == 2
    table = (work / "embeddings.npy").read_bytes()
    with pytest.raises(InputError, match=r"other settings, so they cannot be used: --truncate was 10, now 12"):
        embed_resumably(model, "mean", texts, work, truncate=12, keep=True)
    assert (work / "embeddings.npy").read_bytes() == table  # refused, never overwritten
    with pytest.warns(UserWarning, match="2 of 3 texts were cut"):  # NumPy sizes are the same settings
        numpy_sized, _ = embed_resumably(model, "mean", texts, work, truncate=np.int64(10), chunk_size=np.int64(1024),
                                         keep=True)
    assert torch.equal(numpy_sized, first)


TABLE_DAMAGE = [  # what a crash, a hand edit or a copy between machines leaves of a kept table or its sidecar
    ("table empty", lambda w: (w / "embeddings.npy").write_bytes(b"")),
    ("table cut short", lambda w: (w / "embeddings.npy").write_bytes((w / "embeddings.npy").read_bytes()[:200])),
    ("table one row short", lambda w: np.save(w / "embeddings.npy", np.load(w / "embeddings.npy")[:-1])),
    ("table one column short", lambda w: np.save(w / "embeddings.npy", np.load(w / "embeddings.npy")[:, :-1])),
    ("table float64", lambda w: np.save(w / "embeddings.npy", np.load(w / "embeddings.npy").astype(np.float64))),
    ("table NaN", lambda w: np.save(w / "embeddings.npy", np.full((3, 32), np.nan, dtype=np.float32))),
    ("sidecar a list", lambda w: (w / "embeddings.npy.json").write_text("[]")),
    ("sidecar cuts a text", lambda w: (w / "embeddings.npy.json").write_text(json.dumps(
        {**json.loads((w / "embeddings.npy.json").read_text()), "truncated_rows": "x"}))),
]


@pytest.mark.parametrize("damage", [case[1] for case in TABLE_DAMAGE], ids=[case[0] for case in TABLE_DAMAGE])
def test_a_damaged_kept_table_is_embedded_again(model, tmp_path: Path, damage) -> None:
    """A kept table is derived work in the command's own folder: one that is not what the job wrote is embedded
    again, to the same vectors. Before, a table cut short was a traceback, one row or column
    short, float64 or NaN was returned as the texts' vectors, and a sidecar of the wrong shape a traceback or a
    false warning of cut texts."""
    from minidecoder.running.jobs import embed_resumably

    texts, work = ["short", "a cat sat on the mat", "dogs run"], tmp_path / "work"
    clean, _ = embed_resumably(model, "mean", texts, tmp_path / "clean")
    embed_resumably(model, "mean", texts, work, keep=True)
    damage(work)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no cut is said: none was made
        again, summary = embed_resumably(model, "mean", texts, work, keep=True)
    assert summary["chunks_computed"] == 1 and again.dtype == torch.float32 and torch.equal(again, clean)


def test_a_row_with_its_own_context_and_a_context_for_every_row_is_named_at_the_scan(model, tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text('{"text": "a b"}\n{"text": "c d", "context": "Q"}\n', encoding="utf-8")
    with pytest.raises(InputError, match=r'in\.jsonl line 2 has its own "context" and one was given for every row'):
        run_embedding_job(model, "mean", source, tmp_path / "out.npy", context="every row's")
    assert not list(tmp_path.glob(".out.npy*"))


# ---- scale: 100k texts stream through bounded memory -----------------------------------------------------
@dataclasses.dataclass
class HashMethod(Method):
    """A stand-in method (no model forward): a deterministic vector per text, so 100k rows run fast."""

    name = "hash"

    def embed_batch(self, model, texts: list[str], forward=None) -> torch.Tensor:
        seeds = [int.from_bytes(hashlib.sha256(t.encode()).digest()[:4], "little") for t in texts]
        return torch.stack([torch.arange(model.config.hidden_size, dtype=torch.float32) + s % 1000 for s in seeds])


def test_hundred_thousand_texts_stream_with_bounded_memory(model, tmp_path: Path) -> None:
    rows = 100_000
    source = write_lines(tmp_path / "in.txt", rows)
    tracemalloc.start()
    try:
        summary = run_embedding_job(model, HashMethod(), source, tmp_path / "out.npy", chunk_size=4096,
                                    batch_size=512)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert summary["rows"] == rows
    whole_output = rows * model.config.hidden_size * 4  # 12.8 MB
    assert peak < whole_output / 2, f"peak Python allocation {peak / 1e6:.1f} MB: the job held too much"
    out = np.load(tmp_path / "out.npy", mmap_mode="r")
    assert out.shape == (rows, model.config.hidden_size)
    last = source.read_text().splitlines()[-1]
    assert np.array_equal(out[-1], HashMethod().embed_batch(model, [last])[0].numpy())


@pytest.mark.parametrize("settings", ["--limit 5", ["--limit", 5]])
def test_an_owner_record_whose_settings_were_edited_is_named(tmp_path: Path, settings) -> None:
    """owner.json's settings hand-edited into a text or a list failed as a TypeError (string indices) when the
    command's flags were compared with them."""
    from minidecoder.running.jobs import OWNER_FILE, check_work_owner

    work = tmp_path / ".out.json.partial"
    work.mkdir()
    np.save(work / "embeddings.npy", np.zeros((1, 2), dtype=np.float32))  # kept work to protect
    (work / OWNER_FILE).write_text(json.dumps({"command": "minidecoder eval sts", "settings": settings}))
    with pytest.raises(InputError, match=f"records the settings .*cannot be checked.*\n.*delete {work}"):
        check_work_owner(work, "minidecoder eval sts", {"--limit": 5})
