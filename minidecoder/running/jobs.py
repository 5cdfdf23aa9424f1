"""A long embedding job that streams its input, survives interruption, and never loses or clobbers output.

    run_embedding_job(model, "prompteol", "sentences.txt", "vectors.npy", chunk_size=1024)

Input: a `.txt` file with one text per line, or a `.jsonl` file with one object per line holding a
"text" string and, if it likes, a "context" string (read by the model, never pooled: `minidecoder.embed`'s
(context, text) pair), so one job embeds texts under many instructions; `context=` gives every row one. The file is read line by line (never whole); a line ends at `\\n`, `\\r\\n` or a lone `\\r`
(old Mac files: `a\\rb\\rc\\r` is three rows, as a user expects). Invalid UTF-8, a blank line, a JSON line
without "text", a text holding a lone surrogate is an error naming the line.

Work happens in a folder beside the output, `.NAME.partial/`:

    manifest.json          what the results depend on: model (source, config.json and tokenizer
                           sha256), dtype, device, fast paths, method.describe(), batch size, truncation, chunk
                           size, and the input's sha256 and line count
    chunk-000000.npy ...   (rows, E) float32 embeddings of input rows [k * chunk_size, ...), each
    chunk-000000.json      written to a temporary name and renamed, so a chunk that exists is whole

A run that finds the folder resumes from the chunks already there (after Ctrl-C or kill -9), provided
the manifest matches; with other settings it refuses and says which ones differ. Chunks are computed
independently (length-sorted batches within a chunk), so a resumed job writes byte-identical output.
At the end the chunks are streamed into the output (`.npy` or `.safetensors`) under a temporary name,
published through minidecoder.output_files (never replacing a file without `overwrite=True`, even one
that appeared during the run); then the folder is removed. The output and its sidecar are claimed
(locked, checked) for the whole job.

`rows=(start, end)` runs one shard of the input (its row numbers stay the input's): how
minidecoder.running.distributed splits a job across ranks, each keeping its own folder.

`KeptChunks` is that folder (manifest check, chunk files, Ctrl-C line): the job keeps its chunks in one,
and a caller that computes its own chunks can too (`minidecoder sweep` keeps one per batch).
`owned_work_folder` is the owner check of a command's kept-work folder (`eval sts` and `sweep` both use
`.PREFIX.json.partial/`): its `owner.json` names the command, its command line and the flags that choose
its inputs, so one command never takes over or removes another's kept work, and a folder left with no
finished chunk is removed however the run ends.

Metadata travels with the output: `.safetensors` carries it in its header (`__metadata__`, each
entry JSON-encoded), `.npy` gets a sidecar `NAME.npy.json`. It holds the manifest and, when
`truncate` cut any text, which rows and from how many tokens (the driver never truncates silently).
"""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import itertools
import json
import re
import shutil
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np

from minidecoder.errors import (InputError, Interrupted, MinidecoderError, OutputError, TruncationWarning,
                                describe_unusable_file, is_whole_number)
from minidecoder.fast.options import fast_paths_of
from minidecoder.output_files import (Sha256Reader, check_not_inputs, claim_outputs, read_kept_json, write_chunk,
                                      write_failure, write_kept, write_streamed, write_whole)
from minidecoder.running.texts import check_context, check_text
from minidecoder.sources.checksums import model_identity

if TYPE_CHECKING:  # torch is only named in an annotation here
    import torch

MANIFEST_VERSION = 3  # 2: the model is bound to its weight files (sizes and sha256); 3: and its fast paths
FORMATS = (".npy", ".safetensors")
FINISHED_TABLE = "embeddings.npy"  # `embed_resumably`'s table, in its work folder


def run_embedding_job(model, method, input_path: str | Path, output_path: str | Path, chunk_size: int = 1024,
                      overwrite: bool = False, batch_size: int | None = None, progress: bool | Callable[[int, int], None] = False,
                      truncate: int | None = None, extra_metadata: dict[str, Any] | None = None,
                      wait: bool = False, rows: tuple[int, int] | None = None, context: str | None = None,
                      **options: Any) -> dict[str, Any]:
    """Embed every text of `input_path` into `output_path` (.npy or .safetensors), resumably.

    method: a registry name (with `**options`) or a Method object. progress: True for a bar on stderr,
    or a callable `progress(done_rows, total_rows)` called after each chunk. extra_metadata: more
    entries for the output's metadata (e.g. the command line); they are not part of the manifest.
    wait: when another run holds the output's lock, wait for it instead of refusing.
    rows: (start, end) to embed only input rows [start, end), one shard of a job split across processes
    (minidecoder.running.distributed); the manifest records them, and row numbers stay the input's.
    context: a context for every row (a .jsonl row may carry its own instead).
    Returns a summary: output, rows, dim, chunks computed now, chunks reused from an earlier run, rows
    computed now, truncated rows.
    """
    from minidecoder.methods import Method, build_method

    input_path, output_path = Path(input_path), Path(output_path)
    if isinstance(method, str):
        method = build_method(method, **options)
    elif not isinstance(method, Method) or options:
        raise InputError("method must be a method name (with options) or a Method object (without extra options)",
                         "e.g. run_embedding_job(model, 'prompteol', ...) or run_embedding_job(model, build_method(...), ...)")
    if output_path.suffix not in FORMATS:
        raise InputError(f"output {output_path} must end in .npy or .safetensors", "e.g. --output vectors.npy")
    chunk_size, batch_size, truncate = _checked_sizes(chunk_size, batch_size, truncate)
    check_not_inputs(job_outputs(output_path), [input_path])
    check_output_free(output_path, overwrite)
    method.check(model)
    kind, checksum, total = scan_input(input_path, context)  # one streaming pass: sha256, line count, every line valid
    _check_shard(rows, total, input_path)
    with claim_outputs(job_outputs(output_path), overwrite=overwrite, wait=wait, inputs=[input_path]):
        return _run_locked(model, method, input_path, output_path, chunk_size, batch_size, progress, truncate,
                           extra_metadata, kind, checksum, total, overwrite, rows, context)


def _checked_sizes(chunk_size: Any, batch_size: Any, truncate: Any) -> tuple[int, int | None, int | None]:
    """A job's chunk size, batch size (None: batches filled by tokens, minidecoder.embed's default) and truncate
    (None: none), each a positive whole number, as the plain ints its JSON manifest records (a NumPy integer
    is one too: recorded as itself, a resumed job's manifest would never match)."""
    for name, value in (("chunk_size", chunk_size), ("batch_size", batch_size)):
        if name == "batch_size" and value is None:
            continue
        if not is_whole_number(value, 1):
            raise InputError(f"{name}={value!r} must be a positive integer", f"e.g. {name}=1024")
    if truncate is not None and not is_whole_number(truncate, 1):
        raise InputError(f"truncate={truncate!r} must be a positive number of tokens",
                         "e.g. truncate=512 (--truncate 512) keeps the first 512 tokens of each text")
    return int(chunk_size), None if batch_size is None else int(batch_size), None if truncate is None else int(truncate)


def _check_shard(rows: tuple[int, int] | None, total: int, input_path: Path) -> None:
    """A shard's (start, end) lies inside the input's rows and holds at least one."""
    if rows is None:
        return
    start, end = rows
    if not 0 <= start < end <= total:
        raise InputError(f"rows={rows!r} is not a range of {input_path}'s {total} rows",
                         f"give (start, end) with 0 <= start < end <= {total}")


def job_manifest(model, method, batch_size: int | None, truncate: int | None, chunk_size: int,
                 scanned: tuple[str, str, int], rows: tuple[int, int] | None = None,
                 context: str | None = None) -> dict[str, Any]:
    """What a job's results depend on (its work folder's manifest.json, and the output's metadata):
    `scanned` is `scan_input`'s (format, sha256, rows); `rows` a shard's (start, end), recorded only then."""
    kind, checksum, total = scanned
    manifest = {
        "version": MANIFEST_VERSION,
        "model": model_identity(model),
        "dtype": str(model.dtype).replace("torch.", ""),
        "device": model.device.type,
        "fast_paths": _jsonable(fast_paths_ran(model)),  # graphs' buckets round differently
        "method": _jsonable(method.describe()),
        "batch_size": batch_size,
        "truncate": truncate,
        "chunk_size": chunk_size,
        "input": {"format": kind, "sha256": checksum, "rows": total},
        **({"context": context} if context is not None else {}),  # absent when unused: older kept work resumes
    }
    if rows is not None:
        manifest["shard"] = {"rows": list(rows)}
    return manifest


def job_outputs(output_path: str | Path) -> list[Path]:
    """The files a job writes: the output, and for `.npy` its metadata sidecar `NAME.npy.json`."""
    output_path = Path(output_path)
    sidecar = output_path.with_name(output_path.name + ".json")
    return [output_path, sidecar] if output_path.suffix == ".npy" else [output_path]


def embed_resumably(model, method, texts: list[str], work: str | Path, batch_size: int | None = None,
                    progress: bool | Callable[[int, int], None] = False,
                    chunk_size: int = 1024, truncate: int | None = None,
                    keep: bool = False) -> tuple["torch.Tensor", dict[str, Any]]:
    """`embed(model, texts, method)` as a job in the folder `work`, so that Ctrl-C or a kill keeps every
    finished chunk there and the same call resumes from them (`minidecoder eval` uses it). Returns the
    (N, E) float32 embeddings and the job's summary; `work` is removed once they are read back, unless
    `keep`: then the finished table stays there (`embeddings.npy`, counted as kept work), a later call with
    the same texts and settings reads it back instead of embedding again (one damaged since is embedded
    again), and the caller removes `work` when it is done with them (an eval command, once its report is
    written: a Ctrl-C while it scores loses no embedding). `truncate=N` keeps the first N tokens of a text
    past it (the summary counts "truncated_rows").

    The texts are written as JSON Lines with ASCII escapes, so no character inside a text (a line
    break, U+2028) can split a row."""
    import torch

    from minidecoder.methods import build_method

    method = build_method(method) if isinstance(method, str) else method
    chunk_size, batch_size, truncate = _checked_sizes(chunk_size, batch_size, truncate)  # before a kept table's check
    work = Path(work)
    try:
        work.mkdir(parents=True, exist_ok=True)
        source = work / "texts.jsonl"
        data = "".join(json.dumps({"context": text[0], "text": text[1]} if isinstance(text, tuple) else {"text": text})
                       + "\n" for text in texts).encode("ascii")
        if not source.is_file() or source.read_bytes() != data:
            write_kept(source, data)
    except OSError as error:
        cause, way_out = write_failure(error, work / "texts.jsonl")
        raise OutputError(f"could not write the texts to embed into {work}: {cause}",
                          f"{way_out}, then run the same command again") from None
    output = work / FINISHED_TABLE
    finished = _finished_job(model, method, source, output, chunk_size, batch_size, truncate) if keep else None
    if finished is None:
        with warnings.catch_warnings():  # the job names rows by lines of its own file, which tell a caller nothing
            warnings.simplefilter("ignore", TruncationWarning)
            summary = run_embedding_job(model, method, source, output, chunk_size=chunk_size, batch_size=batch_size,
                                        progress=progress, overwrite=True, truncate=truncate)
        table = np.load(output)  # (N, E)
    else:
        table, summary = finished
    if summary["truncated_rows"]:
        warnings.warn(f"truncate={truncate}: {summary['truncated_rows']} of {len(texts)} texts were cut to their first "
                      f"{truncate} tokens", TruncationWarning, stacklevel=2)
    vectors = torch.from_numpy(table)  # (N, E)
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
    return vectors, summary


def _finished_job(model, method, source: Path, output: Path, chunk_size: int, batch_size: int | None,
                  truncate: int | None) -> tuple[np.ndarray, dict[str, Any]] | None:
    """The (N, E) table the job that already wrote `output` from `source` with these settings left, and that
    job's summary, all of it reused; None where no job finished there, or what it left is damaged (cut short,
    edited): the job then runs again and replaces it. A table made with other settings is refused, as an
    interrupted job's chunks are, naming what differs."""
    if not output.is_file():
        return None
    try:
        metadata = load_metadata(output)
    except (OSError, ValueError):  # no sidecar: the table was never published whole
        return None
    if not isinstance(metadata, dict) or not isinstance(metadata.get("truncated_rows"), dict):
        return None
    manifest = _jsonable(job_manifest(model, method, batch_size, truncate, chunk_size, scan_input(source)))
    made = {key: metadata.get(key) for key in manifest}
    if not serves(made, manifest):
        raise _other_settings(output.parent, "finished embeddings made with other settings, so they cannot be used",
                              "use them", made, manifest)
    rows, dim = manifest["input"]["rows"], model.config.hidden_size
    try:
        table = np.load(output)  # read whole, as a kept chunk is: a memory map of a cut-short file is a SIGBUS
    except (OSError, ValueError, EOFError):
        return None
    if table.dtype != np.float32 or table.shape != (rows, dim) or not np.isfinite(table).all():
        return None  # a run never writes one: embed refuses NaN
    return table, {"output": str(output), "rows": rows, "dim": dim, "chunks_computed": 0,
                   "chunks_reused": -(-rows // chunk_size), "rows_computed": 0,
                   "truncated_rows": len(metadata["truncated_rows"])}


def check_output_free(output_path: Path, overwrite: bool) -> None:
    """Refuse an existing output, or its `.npy.json` sidecar, unless `overwrite`."""
    output_path = Path(output_path)
    if output_path.is_dir():
        raise InputError(f"output {output_path} is a directory", "give a file name ending in .npy or .safetensors")
    taken = [p for p in (output_path, output_path.with_name(output_path.name + ".json"))
             if p.exists() and (p == output_path or output_path.suffix == ".npy")]
    if taken and not overwrite:
        raise InputError(f"output {taken[0]} already exists; it is never overwritten silently",
                         "choose another output path, delete it, or pass overwrite=True (--overwrite)")


def _run_locked(model, method, input_path: Path, output_path: Path, chunk_size: int, batch_size: int, progress,
                truncate: int | None, extra_metadata: dict[str, Any] | None, kind: str, checksum: str,
                total: int, overwrite: bool, rows: tuple[int, int] | None = None,
                context: str | None = None) -> dict[str, Any]:
    from minidecoder.running.embedding import embed_rows, truncate_texts, warn_truncated
    from minidecoder.running.texts import split_contexts

    manifest = job_manifest(model, method, batch_size, truncate, chunk_size, (kind, checksum, total), rows, context)
    if kind == "jsonl" and not method.reads_empty_text():  # named by its line here, not by a chunk's row later
        for number, text in enumerate(_read_texts(input_path, kind), start=1):
            if (text[1] if isinstance(text, tuple) else text) == "":
                raise InputError(f'{input_path} line {number} is the empty text {{"text": ""}} and method '
                                 f"{method.name!r} pools over a text's own tokens: it has nothing to pool",
                                 "remove that line, or use a prompt method read at its last token (e.g. prompteol)")
    start, end = rows if rows is not None else (0, total)
    total = end - start  # the rows this job embeds (a shard's, or all of them)
    _check_fits(model, method, input_path, kind, start, end, chunk_size, truncate, context)
    work = output_path.parent / f".{output_path.name}.partial"
    num_chunks = (total + chunk_size - 1) // chunk_size
    kept = KeptChunks(work, manifest, num_chunks)
    computed = rows_computed = 0
    bar = _bar(total, progress)
    done = 0
    try:
        for k, texts in enumerate(_chunks(itertools.islice(_read_texts(input_path, kind), start, end), chunk_size)):
            if not kept.done(k):
                report: dict[str, Any] = {}
                first_row = start + k * chunk_size  # the input's row numbers, in a shard too
                plain, contexts = split_contexts(texts, context)
                if truncate is not None:  # cut here, as embed would, but said once for the job, by line (below)
                    plain = truncate_texts(model.tokenizer, plain, truncate, report, name_row=None)
                vectors = embed_rows(model, plain, method, batch_size, False, None, report, contexts,
                                     _line_namer(input_path, first_row))
                info = {"rows": len(texts), "truncated_rows": {str(first_row + r): n
                                                               for r, n in report.get("truncated_rows", {}).items()}}
                kept.save(k, vectors.numpy(), info)
                computed += 1
                rows_computed += len(texts)
            done += len(texts)
            _advance(bar, progress, done, total, len(texts))
    except KeyboardInterrupt:
        raise kept.interrupted() from None
    except BaseException:
        kept.failed()  # e.g. a refused option, a too-long text
        raise
    finally:
        if bar is not None:
            bar.close()

    truncated: dict[str, int] = {}
    for k in range(num_chunks):
        truncated.update(_chunk_cuts(kept, k, start + k * chunk_size, _chunk_rows(k, chunk_size, total)))
    if truncated:
        warn_truncated(truncate, [f"{input_path} line {int(row) + 1}" for row in sorted(truncated, key=int)], total)
    metadata = {**(extra_metadata or {}), **manifest, "rows": total, "truncated_rows": truncated}
    dim = model.config.hidden_size  # every method's width (embed_rows' table)
    _assemble(lambda k: kept.array(k, (_chunk_rows(k, chunk_size, total), dim)), work, num_chunks, total, dim,
              output_path, metadata, overwrite)
    kept.remove()
    return {"output": str(output_path), "rows": total, "dim": dim, "chunks_computed": computed,
            "chunks_reused": kept.reused, "rows_computed": rows_computed, "truncated_rows": len(truncated)}


def _chunk_rows(k: int, chunk_size: int, total: int) -> int:
    """The rows of chunk k of a job of `total` rows: `chunk_size`, fewer in the last."""
    return min(chunk_size, total - k * chunk_size)


def _chunk_cuts(kept: KeptChunks, k: int, first_row: int, rows: int) -> dict[str, int]:
    """Chunk k's truncated rows ({input row: tokens before the cut}) from its record, each a row of the chunk:
    an edited record would name lines the job never cut."""
    cuts = kept.record(k, {"truncated_rows": dict})["truncated_rows"]
    for row, tokens in cuts.items():
        if not (row.isascii() and row.isdigit() and first_row <= int(row) < first_row + rows
                and is_whole_number(tokens, 1)):
            raise _damaged_chunk(kept.work, k, f"has a record naming a truncated row {row!r}: {tokens!r} that "
                                               f"is not one of its rows {first_row}-{first_row + rows - 1}")
    return cuts


def _line_namer(input_path: Path, first_row: int) -> Callable[[int], str]:
    """How a chunk's errors name its row r: by the input's line."""
    return lambda r: f"{input_path} line {first_row + r + 1}"


def _check_fits(model, method, input_path: Path, kind: str, start: int, end: int, chunk_size: int,
                truncate: int | None, context: str | None) -> None:
    """Every text fits the model's context as the method runs it (after `truncate`), checked before the first
    forward and named by its line: a text found too long only when its chunk comes would stop a job whose
    earlier chunks are kept under settings (no --truncate) its corrected rerun cannot resume."""
    from minidecoder.running.embedding import check_texts_fit, forward_length

    if getattr(model, "max_context", None) is None:
        return
    length = forward_length(model, method)  # once for the job, not once a chunk
    for k, rows in enumerate(_chunks(itertools.islice(_read_texts(input_path, kind), start, end), chunk_size)):
        check_texts_fit(model, method, rows, _line_namer(input_path, start + k * chunk_size), truncate, context,
                        length=length)


# ---- input ---------------------------------------------------------------------------------------------
JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")


def scan_input(path: str | Path, context: str | None = None) -> tuple[str, str, int]:
    """(format, sha256, rows) of an input file, every line checked (streamed): a cheap check to run
    before a model loads. `context`: one given for every row, which a row's own "context" contradicts."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"input file {path} {describe_unusable_file(path)}", "give a .txt (one text per line) or .jsonl file")
    kind = "jsonl" if path.suffix.lower() in JSONL_SUFFIXES else "txt"
    checksum, total = _scan(path, kind, context)
    if total == 0:
        raise InputError(f"{path} has no rows", "put one text per line")
    return kind, checksum, total


def _scan(path: Path, kind: str, context: str | None = None) -> tuple[str, int]:
    """sha256 of the file and its number of texts, validating every line on the way (streamed)."""
    count = 0
    with path.open("rb") as handle:
        reader = Sha256Reader(handle)  # one pass hashes what it checks
        for number, raw in enumerate(read_lines(reader), start=1):
            if isinstance(_parse_line(raw, number, path, kind), tuple) and context is not None:
                raise InputError(f'{path} line {number} has its own "context" and one was given for every row too '
                                 "(--context)", 'leave out --context, or the "context" fields')
            count += 1
    return reader.hexdigest(), count


def _read_texts(path: Path, kind: str) -> Iterator[str]:
    with path.open("rb") as handle:
        for number, raw in enumerate(read_lines(handle), start=1):
            yield _parse_line(raw, number, path, kind)


_LINE_END = re.compile(rb"\r\n|\r|\n")


def read_lines(handle, block: int = 1 << 20) -> Iterator[bytes]:
    """The lines of a binary file, without their ends. A line ends at `\\n`, `\\r\\n` or a lone `\\r`;
    a final line end makes no empty row. Streamed in blocks (an old Mac file has no `\\n` at all, so
    reading by `\\n` would read it whole)."""
    pending = b""
    while True:
        data = handle.read(block)
        pending += data
        start = 0
        for match in _LINE_END.finditer(pending):
            if data and match.end() == len(pending) and match.group() == b"\r":
                break  # perhaps the first half of a \r\n cut by the block's edge: the next block decides
            yield pending[start:match.start()]
            start = match.end()
        pending = pending[start:]
        if not data:
            break
    if pending:
        yield pending


def _parse_line(raw: bytes, number: int, path: Path, kind: str) -> str | tuple[str, str]:
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        # A UTF-16 byte order mark (what Windows PowerShell's `>` writes) names the encoding to convert from.
        utf16 = number == 1 and raw[:2] in (b"\xff\xfe", b"\xfe\xff")
        mark = "; it begins with a UTF-16 byte order mark" if utf16 else ""
        raise InputError(f"{path} line {number} is not valid UTF-8 (byte {error.start}: "
                         f"{raw[error.start:error.start + 4]!r}{mark})",
                         f"re-encode the file as UTF-8, e.g. `iconv -f {'utf-16' if utf16 else 'latin1'} -t utf-8 "
                         "in.txt > out.txt`") from None
    if number == 1 and line.startswith("\ufeff"):
        line = line[1:]  # a UTF-8 byte order mark is not text
    if kind == "jsonl":
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise InputError(f"{path} line {number} is not JSON ({error})",
                             'write one object per line, e.g. {"text": "a sentence"}') from None
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise InputError(f'{path} line {number} has no string "text" field', 'write e.g. {"text": "a sentence"}')
        line = record["text"]
        check_text(line, f"{path} line {number}")  # "\ud800" is valid JSON, not Unicode text
        explicit_empty = line == ""  # {"text": ""}: the method decides (a prompt read at its last token embeds it)
        if record.get("context") is not None:
            context = check_context(record["context"], f"{path} line {number}")
            if context and (line.strip() or explicit_empty):
                return context, line  # the (context, text) pair `embed` takes
        if explicit_empty:
            return line
    if not line.strip():
        raise InputError(f"{path} line {number} is empty or whitespace-only",
                         "remove it (row i of the output is line i of the input, so blank lines are not skipped)")
    return line


def _chunks(texts: Iterator[str], size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for text in texts:
        chunk.append(text)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


# ---- the work folder -------------------------------------------------------------------------------------
class JobInterrupted(Interrupted):
    """Ctrl-C during a job: `saved` of `chunks` chunks are kept in `work`; str() says so and how to resume."""

    def __init__(self, saved: int, chunks: int, work: Path) -> None:
        self.saved, self.chunks, self.work = saved, chunks, work
        if saved == 0:
            line = "interrupted before the first chunk was finished; nothing was kept; run the same command again"
        else:
            line = (f"interrupted; {saved} of {chunks} chunks are saved in {work}; run the same command again to "
                    "resume")
        super().__init__(line)


class KeptChunks:
    """A job's work folder of numbered chunks: `run_embedding_job` keeps its chunks in one, and so does a
    caller that computes its own (`minidecoder sweep` keeps one per batch). A chunk is any float32 array
    with a small JSON record beside it.

        kept = KeptChunks(work, manifest, count)  # resumes a folder of an equal manifest, else refuses
        if kept.done(k): array, info = kept.load(k, shape, fields)  # read back bit for bit, checked
        else: kept.save(k, array, info)            # once chunk k is computed
        raise kept.interrupted() from None         # on Ctrl-C: JobInterrupted (what is kept)
        kept.remove()                              # once the result is written
    """

    def __init__(self, work: str | Path, manifest: dict[str, Any], count: int) -> None:
        self.work, self.count = Path(work), count
        self.created = _open_work_folder(self.work, _jsonable(manifest))
        self.reused = self.saved()  # chunks an earlier run finished

    def done(self, k: int) -> bool:
        return _chunk_done(self.work, k)

    def saved(self) -> int:
        return sum(_chunk_done(self.work, k) for k in range(self.count))

    def save(self, k: int, array: np.ndarray, info: dict[str, Any]) -> None:
        _write_chunk(self.work, k, array, info, self.count)

    def load(self, k: int, shape: tuple[int, ...], fields: dict[str, type | tuple[type, ...]],
             finite: bool = True) -> tuple[np.ndarray, dict[str, Any]]:
        """The chunk's array, read back bit for bit, and its record, each checked (see `array`, `record`)."""
        return self.array(k, shape, finite), self.record(k, fields)

    def array(self, k: int, shape: tuple[int, ...], finite: bool = True) -> np.ndarray:
        """The chunk's array, which must be float32 of `shape` (and, with `finite`, hold no NaN or inf): a chunk
        cut short, edited or copied in from another run is refused, naming its file, never stitched in."""
        array = _load_chunk(self.work, k)
        if array.dtype != np.float32 or array.shape != tuple(shape):
            raise _damaged_chunk(self.work, k, f"holds {array.dtype} of shape {array.shape}, not the float32 of "
                                               f"shape {tuple(shape)} this run computes")
        if finite and not np.isfinite(array).all():
            raise _damaged_chunk(self.work, k, "holds NaN or inf, which this run never keeps")
        return array

    def record(self, k: int, fields: dict[str, type | tuple[type, ...]]) -> dict[str, Any]:
        """The chunk's JSON record, which must be an object holding each of `fields` with its type."""
        try:
            record = json.loads(_chunk_path(self.work, k, ".json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise _damaged_chunk(self.work, k, f"has an unreadable record ({error})") from None
        wrong = sorted(field for field, kind in fields.items()
                       if not isinstance(record, dict) or not isinstance(record.get(field), kind))
        if wrong:
            raise _damaged_chunk(self.work, k, f"has a record without a valid {', '.join(map(repr, wrong))}")
        return record

    def interrupted(self) -> JobInterrupted:
        """Ctrl-C: what is kept (a folder this run made and finished nothing in is removed)."""
        self.failed()
        return JobInterrupted(self.saved(), self.count, self.work)

    def failed(self) -> None:
        """A run that stops before its first chunk leaves nothing behind, so that its corrected rerun is
        never told about an interrupted job with other settings (as `run_embedding_job`)."""
        if self.created and self.saved() == 0:
            shutil.rmtree(self.work, ignore_errors=True)

    def remove(self) -> None:
        shutil.rmtree(self.work, ignore_errors=True)


# ---- who owns a work folder ------------------------------------------------------------------------------
OWNER_FILE = "owner.json"  # in every kept-work folder: the command that keeps its work there


# what a removal would lose: a job's finished chunks, the finished table an eval command keeps until its report
# is written, and the finished results a command keeps beside them (named `*.kept.npy` / `*.kept.json`: eval
# transfer's embeddings and trained probes)
KEPT_WORK = ("chunk-*.npy", FINISHED_TABLE, "*.kept.npy", "*.kept.json")


def holds_kept_work(work: str | Path) -> bool:
    """True when `work` (or a job folder inside it) holds a finished chunk or result (`KEPT_WORK`)."""
    return any(any(Path(work).rglob(pattern)) for pattern in KEPT_WORK)


def work_owner(work: str | Path) -> dict[str, Any] | None:
    """The owner recorded in `work` ({"command": ..., "command_line": ...}), or None when none is."""
    owner = read_kept_json(Path(work) / OWNER_FILE)
    return owner if isinstance(owner, dict) else None


def check_work_owner(work: str | Path, command: str, settings: dict[str, Any] | None = None) -> None:
    """Refuse a work folder that holds another command's kept work (an interrupted `eval sts` and a `sweep`
    on one --output share the name `.PREFIX.json.partial`): each would take the folder as its own and
    remove it when it ends; and the same command's with other `settings` ({flag: value}), named by their
    flags. A folder that holds no kept work (`KEPT_WORK`: a finished chunk or table) has nothing to lose."""
    work = Path(work)
    if not work.is_dir() or not holds_kept_work(work):
        return
    owner = work_owner(work)
    if owner is not None and owner.get("command") == command:
        kept = owner.get("settings") or {}
        if not isinstance(kept, dict):  # hand-edited: what the kept work was made with can no longer be checked
            raise InputError(f"{work / OWNER_FILE} records the settings {kept!r}, not the flags `{command}` was given, "
                             "so its kept work cannot be checked before it is resumed", f"delete {work} to start over")
        changed = [f"{flag} was {kept.get(flag)!r}, now {value!r}" for flag, value in (settings or {}).items()
                   if flag in kept and kept[flag] != value]
        if changed:
            raise InputError(f"{work} holds the kept work of an unfinished `{command}` with other settings, so it "
                             "cannot be resumed: "
                             + "; ".join(changed),
                             f"rerun `{owner.get('command_line') or command}` to resume it, or delete {work} to "
                             "start over")
        return
    if owner is None:
        made_by, again = "a run that did not record its command (an earlier minidecoder)", "rerun that command"
    else:
        made_by = f"an interrupted `{owner.get('command')}`"
        again = f"run `{owner.get('command_line') or owner.get('command')}` again"
    raise OutputError(f"{work} holds the kept work of {made_by}, not of `{command}`; one run never takes over or "
                      "removes another's kept work",
                      f"{again} to finish it, choose another --output, or delete {work} to discard that work")


@contextlib.contextmanager
def owned_work_folder(work: str | Path, command: str, command_line: str | None = None,
                      settings: dict[str, Any] | None = None) -> Iterator[Path]:
    """The kept-work folder `work`, owned by `command` with `settings` ({flag: value}) for the block (see
    `check_work_owner`): created with its owner recorded, and removed when the block ends (done, failed or
    interrupted) with no kept work in it, so that "nothing was kept" leaves nothing behind."""
    work = Path(work)
    settings = _jsonable(settings or {})
    check_work_owner(work, command, settings)
    if work.is_dir() and (work_owner(work) or {}).get("command") != command:
        shutil.rmtree(work, ignore_errors=True)  # another's, or an unrecorded one, with no kept work
    try:
        work.mkdir(parents=True, exist_ok=True)
        if not holds_kept_work(work):  # kept work keeps the record of the command that made it, which resumes it
            write_kept(work / OWNER_FILE, json.dumps({"command": command, "command_line": command_line,
                                                     "settings": settings}, sort_keys=True).encode("utf-8"))
    except OSError as error:
        cause, way_out = write_failure(error, work / OWNER_FILE)
        raise OutputError(f"could not start the work folder {work}: {cause}",
                          f"{way_out}, then run the same command again") from None
    try:
        yield work
    finally:  # however the block ends, a folder with no kept work is nothing to keep
        if not holds_kept_work(work):
            shutil.rmtree(work, ignore_errors=True)


def fast_paths_ran(model) -> dict[str, Any]:
    """The model's fast paths as they run on its device, for the manifest and the sidecar: graphs=True off CUDA
    pads to buckets and reuses static buffers but captures nothing, so it is recorded as such, never as true."""
    paths = dataclasses.asdict(fast_paths_of(model))
    if paths["graphs"] and model.device.type != "cuda":
        paths["graphs"] = f"buffers only (no CUDA graphs on {model.device.type})"
    return paths


def _open_work_folder(work: Path, manifest: dict[str, Any]) -> bool:
    """Resume `work` if its manifest matches, else refuse; True when this call created it."""
    path = work / "manifest.json"
    if path.is_file() and not any(work.glob("chunk-*.npy")):
        _clear_work(work)  # no finished chunk: nothing to resume or to lose
    if not path.is_file() and any(work.glob("chunk-*.npy")):  # written before any chunk: lost since, or replaced
        raise InputError(f"{work} holds finished chunks but no manifest.json saying what they were computed with, "
                         "so they cannot be resumed", f"delete {work} to start over")
    if path.is_file():
        try:
            previous = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            previous = None
        if not serves(previous, manifest):
            raise _other_settings(work, "an interrupted job with other settings, so it cannot be resumed",
                                  "resume it", previous, manifest)
        return False
    created = not work.exists()
    try:
        work.mkdir(exist_ok=True)
        write_kept(path, json.dumps(manifest, indent=2, sort_keys=True).encode("utf-8"))
    except OSError as error:
        cause, way_out = write_failure(error, path)  # before the folder goes: it may name what stands in it
        if created:
            shutil.rmtree(work, ignore_errors=True)
        else:  # it held no chunk (see above), but may hold what stands in the way: removed only if empty
            with contextlib.suppress(OSError):
                work.rmdir()
        raise OutputError(f"could not start the job's work folder {work}: {cause}",
                          f"{way_out}, then run the same command again") from None
    return True


def serves(kept: Any, made_now: Any) -> bool:
    """Whether work kept under `kept` (what made it: a job's manifest, a transfer row's identity) is the work
    `made_now` describes: the same, or the same once each method's options that `kept` lacks are left out where
    `made_now` leaves them at their defaults. An option added since the work was kept computes, at its default,
    what the version that kept it did (`pieces`, say): its work still serves. One set otherwise does not, nor
    does an option `kept` has and `made_now` lacks (retired since)."""
    if kept == made_now:
        return True
    if isinstance(kept, list) and isinstance(made_now, list):
        return len(kept) == len(made_now) and all(map(serves, kept, made_now))
    if not (isinstance(kept, dict) and isinstance(made_now, dict)):
        return False
    made_now = _without_options_added_since(kept, made_now)
    return kept.keys() == made_now.keys() and all(serves(kept[key], made_now[key]) for key in kept)


def _without_options_added_since(kept: dict[str, Any], described: dict[str, Any]) -> dict[str, Any]:
    """`described`, where it is a method's describe() (its "method" a method's name), less the options `kept`
    lacks that it leaves at their defaults; any other dict as it is."""
    from minidecoder.methods import METHODS, build_method

    name = described.get("method")
    if not isinstance(name, str) or name not in METHODS:
        return described
    defaults = _jsonable(build_method(name).describe())
    return {option: value for option, value in described.items() if option in kept or defaults.get(option) != value}


def _other_settings(work: Path, held: str, use: str, previous: Any, manifest: dict[str, Any]) -> InputError:
    """The refusal of work kept under another manifest (`held`: what it is, and why it cannot serve), naming
    every setting that differs, with the two ways out: the same settings, or a fresh start."""
    differences = _named_differences(previous, manifest) if isinstance(previous, dict) else ["the manifest is unreadable"]
    return InputError(f"{work} holds {held}: " + "; ".join(differences),
                      f"rerun with the same settings to {use}, or delete {work} to start over")


def _clear_work(work: Path) -> None:
    """Remove what `work` holds except its owner record."""
    for entry in work.iterdir():
        if entry.name != OWNER_FILE:
            shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)


# A manifest's fields in the words of the options that set them: a refusal names what the user can change
# (`--opt layer was -1, now 2`), never a job field (`input.rows`, `method.layer`)
MANIFEST_WORDS = {"version": "the job format (an earlier minidecoder kept it)", "model": "the model (--model)",
                  "dtype": "--dtype", "device": "--device", "batch_size": "--batch-size", "truncate": "--truncate",
                  "chunk_size": "the chunk size", "fast_paths": "the fast paths (--compile, --pack-weights, --graphs)",
                  "input": "the texts to embed (the input file, or the flags that choose the data)"}


def _named_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Every manifest field that differs, in `MANIFEST_WORDS`; the method's by --method and --opt."""
    out = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key, "(absent)"), new.get(key, "(absent)")
        if a == b:
            continue
        if key == "method" and isinstance(a, dict) and isinstance(b, dict):
            out += [("--method" if option == "method" else f"--opt {option}") + f" was {x!r}, now {y!r}"
                    for option, x, y in ((o, a.get(o, "(absent)"), b.get(o, "(absent)")) for o in sorted(set(a) | set(b)))
                    if x != y]
        elif key not in MANIFEST_WORDS:
            out += _differences({key: a}, {key: b})
        elif isinstance(a, dict) and isinstance(b, dict):
            if key == "input":  # checksums and counts of the texts: nothing a user would recognise
                out.append(f"{MANIFEST_WORDS[key]} differs")
            else:  # the model's files by name (`weights.model.safetensors.sha256`), the fast paths by option
                verb = "differ" if key == "fast_paths" else "differs"
                out.append(f"{MANIFEST_WORDS[key]} {verb} ({'; '.join(_differences(a, b))})")
        else:
            out.append(f"{MANIFEST_WORDS[key]} was {a!r}, now {b!r}")
    return out


def _differences(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[str]:
    out = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key, "(absent)"), new.get(key, "(absent)")
        if isinstance(a, dict) and isinstance(b, dict):
            out += _differences(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key} was {a!r}, now {b!r}")
    return out


def _chunk_path(work: Path, k: int, suffix: str) -> Path:
    return work / f"chunk-{k:06d}{suffix}"


def _chunk_done(work: Path, k: int) -> bool:
    return _chunk_path(work, k, ".npy").is_file()  # written last: its presence marks a whole chunk


def _write_chunk(work: Path, k: int, vectors: np.ndarray, info: dict[str, Any], num_chunks: int) -> None:
    try:
        write_chunk(_chunk_path(work, k, ".npy"), np.ascontiguousarray(vectors, dtype=np.float32),
                    _chunk_path(work, k, ".json"), info)
    except OSError as error:
        saved = sum(_chunk_done(work, j) for j in range(num_chunks))
        cause, way_out = write_failure(error, _chunk_path(work, k, ".npy"))
        raise OutputError(f"writing chunk {k} into {work} failed: {cause}; the {saved} finished chunk(s) of "
                          f"{num_chunks} are kept there", f"{way_out}, then run the same command again: it resumes "
                          "from them") from None


def _load_chunk(work: Path, k: int) -> np.ndarray:
    # Read, never memory-mapped: a mapped page the file does not back (a truncated file, a full disk)
    # is a SIGBUS with no message; a chunk is small (chunk_size x E floats).
    try:
        return np.load(_chunk_path(work, k, ".npy"))
    except (ValueError, OSError, EOFError) as error:  # EOFError: an empty file
        raise _damaged_chunk(work, k, f"is unreadable ({error})") from None


def _damaged_chunk(work: Path, k: int, what: str) -> MinidecoderError:
    """A kept chunk that is not what a run writes, with the way out: its array's removal, which recomputes it
    alone (its record is rewritten with it)."""
    return MinidecoderError(f"chunk {k} in {work} {what}",
                            f"delete {_chunk_path(work, k, '.npy')} and rerun to recompute it")


# ---- output ----------------------------------------------------------------------------------------------
def _assemble(chunk: Callable[[int], np.ndarray], work: Path, num_chunks: int, total: int, dim: int, output: Path,
              metadata: dict[str, Any], overwrite: bool) -> None:
    """Copy the chunks (`chunk(k)`: chunk k, checked) into `output` one at a time; published whole at the end.

    A failed write (a full disk, a file that appeared at the output's name) leaves no half-written file,
    keeps every chunk, and says so."""
    try:
        _assemble_to(chunk, work, num_chunks, total, dim, output, metadata, overwrite)
    except OutputError as error:
        raise OutputError(f"{error.problem}; all {num_chunks} computed chunk(s) are kept in {work}", error.fix) \
            from None
    except OSError as error:
        cause, way_out = write_failure(error, output)
        if error.errno in (errno.ENOSPC, errno.EDQUOT):
            way_out += f" (the output takes {total * dim * 4:,} bytes)"
        raise OutputError(f"writing {output} failed: {cause}; all {num_chunks} computed chunk(s) are kept in {work}",
                          f"{way_out}, then run the same command again: it only assembles them") from None


def _assemble_to(chunk: Callable[[int], np.ndarray], work: Path, num_chunks: int, total: int, dim: int,
                 output: Path, metadata: dict[str, Any], overwrite: bool) -> None:
    def fill(handle: BinaryIO) -> None:
        # Streamed (header, then each chunk's bytes), never a memory map over a file a full disk may not back.
        if output.suffix == ".npy":
            np.lib.format.write_array_header_1_0(
                handle, {"descr": np.lib.format.dtype_to_descr(np.dtype("<f4")), "fortran_order": False,
                         "shape": (total, dim)})
        else:
            header = {"__metadata__": {key: json.dumps(value, sort_keys=True) for key, value in metadata.items()},
                      "embeddings": {"dtype": "F32", "shape": [total, dim], "data_offsets": [0, total * dim * 4]}}
            encoded = json.dumps(header, separators=(",", ":")).encode("utf-8")
            encoded += b" " * (-len(encoded) % 8)  # the data starts 8-byte aligned
            handle.write(len(encoded).to_bytes(8, "little"))
            handle.write(encoded)
        for k in range(num_chunks):
            handle.write(np.ascontiguousarray(chunk(k), dtype="<f4").tobytes())
        if output.suffix == ".npy":  # the sidecar once the array is whole, and before it is published
            new = not sidecar.exists()
            write_whole(sidecar, json.dumps(metadata, indent=2, sort_keys=True).encode("utf-8"), overwrite)
            made.append(new)

    sidecar, made = output.with_name(output.name + ".json"), []  # [True]: this run put a sidecar where none was
    try:
        write_streamed(output, fill, overwrite, tmp_folder=work)  # a killed assembly's copy goes with the folder
    except BaseException:
        if made == [True]:  # its output was not published: left, it would refuse the rerun that assembles them
            sidecar.unlink(missing_ok=True)
        raise


def load_metadata(output_path: str | Path) -> dict[str, Any]:
    """The metadata written with a job's output (manifest, rows, truncated rows)."""
    output_path = Path(output_path)
    if output_path.suffix == ".safetensors":
        from safetensors import safe_open
        with safe_open(str(output_path), framework="np") as handle:
            return {key: json.loads(value) for key, value in handle.metadata().items()}
    return json.loads(output_path.with_name(output_path.name + ".json").read_text(encoding="utf-8"))


# ---- small helpers ---------------------------------------------------------------------------------------
def _jsonable(value: Any) -> Any:
    """describe() values as JSON (tuples become lists) so a manifest read back compares equal."""
    return json.loads(json.dumps(value, default=repr))


def _bar(total: int, progress):
    if progress is True:
        from tqdm.auto import tqdm
        return tqdm(total=total, unit="sent", desc="embedding", dynamic_ncols=True)
    return None


def _advance(bar, progress, done: int, total: int, step: int) -> None:
    if bar is not None:
        bar.update(step)
    elif callable(progress):
        progress(done, total)
