"""The dev sweep: one shared pass must give exactly what separate runs of each grid point give.

A tiny Llama (tests/tiny_models.py) and a small fake STS-B dev file in the SentEval layout; every
grid point of each sharing rule (output layers; TP end layers; CP steer layers and alphas) is also
run on its own through `minidecoder.embed` and scored, and the two scores must agree to 1e-6. The
naive cost the report compares with is checked against blocks counted in those separate runs.
"""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

import minidecoder
from minidecoder.errors import InputError
from minidecoder.evaluation import load_tasks
from minidecoder.evaluation.sts import score_embeddings, unique_sentences
from minidecoder.evaluation.sweep import BlockCounter, grid_points, layer_axis, method_at, sweep_sts
from minidecoder.methods import build_method
from tiny_models import tiny_checkpoint

WORDS = "a man woman dog cat is plays runs on the with red big".split()
BATCH = 4


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> minidecoder.Decoder:
    folder = tmp_path_factory.mktemp("tiny-sweep")
    tiny_checkpoint("llama", folder)
    return minidecoder.load(folder, progress=False)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """STSBenchmark/sts-dev.csv (genre, file, year, id, score, s1, s2; tab-separated) and a test file."""
    root = tmp_path_factory.mktemp("sts")
    (root / "STSBenchmark").mkdir()
    rnd = random.Random(0)
    for split in ("dev", "test"):
        lines = []
        for i in range(6):
            s1, s2 = (" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(2, 5))) for _ in range(2))
            lines.append(f"main-captions\tMSRvid\t2012{split}\t{i:04d}\t{rnd.uniform(0, 5):.3f}\t{s1}\t{s2}")
        (root / "STSBenchmark" / f"sts-{split}.csv").write_text("\n".join(lines) + "\n")
    return root


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny matmuls on a shared CPU: one thread is 10x faster than two fighting other processes."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def plain_loop(tiny):
    """The loop may run a shared prompt prefix once (one extra batch-1 pass, same states up to
    rounding); switch it off so that blocks counted here are exactly rows x blocks of the plain loop."""
    from minidecoder.fast.options import fast_paths_overridden
    with fast_paths_overridden(tiny, prefix_cache=False):
        yield


CASES = [
    ("prompteol", {}, {"layer": [1, 2, 4]}),
    ("mean", {}, {"layer": [2, 4]}),
    ("echo", {"pooling": "last"}, {"layer": [3, 4]}),
    ("metaeol", {"tasks": [6, 7]}, {"layer": [2, 4]}),  # two templates averaged
    ("tp", {"start": 1}, {"layer": [2, 3, 4], "end": [1, 2, 3]}),
    ("tp", {"resume_at": 3}, {"layer": [4], "end": [2, 3], "mask_pst_first_layer": [False, True]}),
    ("cp", {}, {"layer": [3, 4], "steer_layer": [0, 2], "alpha": [0.5, 2.0]}),
    ("cp", {"prompt": "ck", "mode": "nr_head"}, {"layer": [3, 4], "steer_layer": [2], "alpha": [0.5, 3.0]}),  # nr_head takes no alpha: 3.0 skipped
    ("cp", {"tp": True, "start": 0, "end": 2}, {"layer": [3, 4], "steer_layer": [1, 2], "alpha": [0.5, 1.0]}),
    ("htp", {"start": 1}, {"layer": [3, 4], "end": [1, 2, 3]}),
    ("reba", {}, {"layer": [2, 4], "weights": ["pooled", "raw"]}),  # one forward folds for every point
]


@pytest.mark.parametrize("name,options,axes", CASES, ids=[f"{c[0]}-{'-'.join(c[2])}" for c in CASES])
def test_one_pass_equals_separate_runs(tiny, data: Path, name: str, options: dict, axes: dict) -> None:
    method = build_method(name, **options)
    result = sweep_sts(tiny, method, axes, data_dir=data, batch_size=BATCH, progress=False)
    (dev,) = load_tasks(["STSBenchmark-dev"], data)
    sentences = unique_sentences([dev])
    for record in result.points:
        if record["skipped"]:
            with pytest.raises(InputError):
                method_at(method, record["options"]).check(tiny)
    valid = [r for r in result.points if not r["skipped"]]
    alone_blocks = 0
    for record in valid:  # every point, run alone
        alone = method_at(method, record["options"])
        with BlockCounter(tiny) as counter:
            vectors = minidecoder.embed(tiny, sentences, alone, batch_size=BATCH)
        alone_blocks += counter.count
        score = score_embeddings([dev], sentences, vectors)["tasks"]["STSBenchmark-dev"]["score"]
        assert abs(score - record["score"]) < 1e-6, (record["options"], score, record["score"])
    cost = result.cost
    assert cost["blocks_naive"] == alone_blocks  # the naive cost is what separate runs compute
    assert cost["blocks_computed"] < cost["blocks_naive"]  # something was shared
    assert result.best["score"] == max(r["score"] for r in result.points if r["score"] is not None)


def test_reading_every_layer_costs_one_forward(tiny, data: Path) -> None:
    """Points that differ only in the layer they read share one forward: ReBA's four full-depth forwards
    (two layers x two weightings) are computed once."""
    result = sweep_sts(tiny, build_method("reba"), {"layer": [2, 4], "weights": ["pooled", "raw"]}, data_dir=data,
                       batch_size=BATCH, progress=False)
    assert result.cost["blocks_computed"] * 4 == result.cost["blocks_naive"]


def test_sweep_refuses_a_test_split(tiny, data: Path) -> None:
    (test,) = load_tasks(["STSBenchmark"], data)
    with pytest.raises(InputError, match="dev only"):
        sweep_sts(tiny, build_method("prompteol"), {"layer": [4]}, dev=test, progress=False)


def test_sweep_refuses_reading_options_beside_a_loaded_dev(tiny, data: Path) -> None:
    """Found: `sweep_sts(..., dev=load_tasks([...])[0], limit=2)` swept every pair of dev: `limit` and `data_dir`
    only say how to read dev, and beside a dev read already they were ignored without a word."""
    (dev,) = load_tasks(["STSBenchmark-dev"], data)
    with pytest.raises(InputError, match=r"sweep_sts was given data read already and limit, which only say how"):
        sweep_sts(tiny, build_method("prompteol"), {"layer": [4]}, dev=dev, limit=2, progress=False)
    with pytest.raises(InputError, match=r"and data_dir, which only") as error:
        sweep_sts(tiny, build_method("prompteol"), {"layer": [4]}, dev=dev, data_dir=data, progress=False)
    assert "load_tasks(['STSBenchmark-dev'], data_dir, limit)" in error.value.fix


def test_kept_batches_resume_to_the_same_scores_and_cost(tiny, data: Path, tmp_path: Path, monkeypatch) -> None:
    """Ctrl-C during a batch keeps the batches finished before it in the work folder; the same call computes
    only the others, and its scores and counts equal an uninterrupted run's exactly. A call with other
    settings is refused and leaves the kept batches as they were."""
    from minidecoder.evaluation import sweep
    from minidecoder.running.jobs import JobInterrupted

    method, axes = build_method("cp"), {"layer": [3, 4], "steer_layer": [0, 2], "alpha": [0.5, 2.0]}
    work = tmp_path / "kept"
    (dev,) = load_tasks(["STSBenchmark-dev"], data)
    batches = -(-len(unique_sentences([dev])) // BATCH)
    clean = sweep_sts(tiny, method, axes, data_dir=data, batch_size=BATCH, progress=False)
    real, calls, stop_at = sweep.sweep_points, [], [2]

    def counted(*args):
        calls.append(1)
        if len(calls) == stop_at[0]:
            raise KeyboardInterrupt  # Ctrl-C inside the second batch
        return real(*args)

    monkeypatch.setattr(sweep, "sweep_points", counted)
    with pytest.raises(JobInterrupted) as stop:
        sweep_sts(tiny, method, axes, data_dir=data, batch_size=BATCH, progress=False, work=work)
    assert (stop.value.saved, stop.value.chunks) == (1, batches)
    for other in ({"batch_size": BATCH - 1}, {"axes": {**axes, "alpha": [0.5]}}):
        with pytest.raises(InputError, match="other settings") as refused:
            sweep_sts(tiny, method, **{"axes": axes, "batch_size": BATCH, **other}, data_dir=data, progress=False,
                      work=work)
        assert ("--batch-size was 4, now 3" if "batch_size" in other else "axes.alpha was [0.5, 2.0], now [0.5]") \
            in str(refused.value)
    assert len(list(work.glob("chunk-*.npy"))) == 1

    calls.clear()
    stop_at[0] = 0
    resumed = sweep_sts(tiny, method, axes, data_dir=data, batch_size=BATCH, progress=False, work=work)
    assert len(calls) == batches - 1  # only the batches not kept
    assert resumed.points == clean.points and resumed.best == clean.best  # the same scores, exactly
    same = ("blocks_computed", "blocks_naive", "batches")
    assert {k: resumed.cost[k] for k in same} == {k: clean.cost[k] for k in same}  # counts cover every batch
    assert (resumed.cost["resumed_batches"], clean.cost["resumed_batches"]) == (1, 0)


SWEEP_DAMAGE = [  # what a crash, a hand edit or a copy from another grid leaves of the first kept batch
    ("one row", lambda p: np.save(p, np.load(p)[:, :1]), r"holds float32 of shape \(8, 1, 32\), not the float32 "
                                                         r"of shape \(8, 4, 32\)"),
    ("one column short", lambda p: np.save(p, np.load(p)[..., :-1]), r"shape \(8, 4, 31\)"),
    ("record a list", lambda p: p.with_suffix(".json").write_text("[]"),
     "without a valid 'blocks_computed', 'blocks_naive', 'seconds'"),
    ("a count as a text", lambda p: p.with_suffix(".json").write_text(
        '{"rows": 4, "blocks_computed": "8", "blocks_naive": 64, "seconds": 0.1}'), "without a valid 'blocks_computed'"),
]


@pytest.mark.parametrize("damage, said", [case[1:] for case in SWEEP_DAMAGE], ids=[case[0] for case in SWEEP_DAMAGE])
def test_a_damaged_kept_batch_is_named_never_scored(tiny, data: Path, tmp_path: Path, monkeypatch, damage,
                                                    said: str) -> None:
    """A kept batch is read back only as the (points, rows, E) array and counts its run wrote: before, a batch of
    one row was broadcast over its four sentences and scored, one column short and a damaged record were
    tracebacks. Each is named with the batch to delete; the same call then recomputes it alone."""
    from minidecoder.errors import MinidecoderError
    from minidecoder.evaluation import sweep
    from minidecoder.running.jobs import JobInterrupted

    method, axes = build_method("cp"), {"layer": [3, 4], "steer_layer": [0, 2], "alpha": [0.5, 2.0]}
    clean = sweep_sts(tiny, method, axes, data_dir=data, batch_size=BATCH, progress=False)
    real, calls = sweep.sweep_points, []

    def stop_at_the_second(*args):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args)

    work = tmp_path / "kept"
    monkeypatch.setattr(sweep, "sweep_points", stop_at_the_second)
    with pytest.raises(JobInterrupted):
        sweep_sts(tiny, method, axes, data_dir=data, batch_size=BATCH, progress=False, work=work)
    monkeypatch.setattr(sweep, "sweep_points", real)
    batch = work / "chunk-000000.npy"
    damage(batch)
    with pytest.raises(MinidecoderError, match=f"chunk 0 in {work} .*{said}") as refused:
        sweep_sts(tiny, method, axes, data_dir=data, batch_size=BATCH, progress=False, work=work)
    assert refused.value.fix == f"delete {batch} and rerun to recompute it"
    batch.unlink()
    resumed = sweep_sts(tiny, method, axes, data_dir=data, batch_size=BATCH, progress=False, work=work)
    assert resumed.points == clean.points


def test_grid_helpers() -> None:
    assert layer_axis("all", 4) == [1, 2, 3, 4]
    assert layer_axis("-1,2,-2", 4) == [2, 3, 4]
    with pytest.raises(InputError):
        layer_axis("9", 4)
    assert grid_points({"a": [1, 2], "b": [3]}) == [{"a": 1, "b": 3}, {"a": 2, "b": 3}]
    with pytest.raises(InputError, match="no option"):
        method_at(build_method("prompteol"), {"end": 3})


def test_cli_writes_stamped_report_and_plots(tiny, data: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from minidecoder.cli import sweep_cmd

    parser = argparse.ArgumentParser(prog="minidecoder")
    sweep_cmd.add_parser(parser.add_subparsers(dest="command", required=True))
    prefix = tmp_path / "out" / "tp"
    args = parser.parse_args(["sweep", "--model", tiny.source, "--method", "tp", "--layers", "all", "--tp-end", "1,2",
                              "--data", str(data), "--batch-size", str(BATCH), "--output", str(prefix), "--plot",
                              "--no-progress"])
    assert args.run(args) == 0
    report = json.loads(prefix.with_suffix(".json").read_text())
    assert report["stamp"]["tasks"] == ["STSBenchmark-dev"] and "data_sha256" in report["stamp"]
    assert report["sweep"]["axes"] == {"layer": [1, 2, 3, 4], "end": [1, 2]}
    assert report["sweep"]["best"]["options"]["end"] in (1, 2)
    assert "blocks computed" in prefix.with_suffix(".md").read_text()
    for axis in ("layer", "end"):
        assert (tmp_path / "out" / f"tp-{axis}.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("axes, given", [(["--method", "mean", "--layers", "2"], "--layers 2"),
                                         (["--method", "cp", "--layers", "-1", "--cp-steer", "1", "--cp-alpha", "0.5"],
                                          "--layers -1, --cp-steer 1, --cp-alpha 0.5"),
                                         (["--method", "tp", "--grid", "start=1"], "--grid start=1")])
def test_plot_of_a_sweep_with_one_value_per_axis_is_refused_before_the_model_loads(data: Path, tmp_path: Path, capsys,
                                                                                   axes: list, given: str) -> None:
    """`sweep --layers 2 --plot` wrote no figure and said nothing: a figure is drawn per axis of two or more values."""
    from cli_runner import cli

    code, err = cli(capsys, "sweep", *axes, "--plot", "--data", str(data), "--output", str(tmp_path / "s"),
                    "--model", "no-such-model-folder", "--no-progress")
    assert code == 2 and "--plot" in err and f"({given})" in err and "a curve needs two or more points" in err, err
    assert "no-such-model-folder" not in err and not list(tmp_path.iterdir())


@pytest.mark.parametrize("axes, said", [(["--method", "tp", "--tp-end", "2,2,3"], "--tp-end 2,2,3 gives end=2 twice"),
                                        (["--method", "tp", "--grid", "num_pst=1,2,1"], "--grid num_pst=1,2,1 gives "
                                                                                        "num_pst=1 twice")])
def test_a_value_given_twice_on_an_axis_is_refused_before_the_model_loads(data: Path, tmp_path: Path, capsys,
                                                                          axes: list, said: str) -> None:
    """Found: `--tp-end 2,2,3` computed end=2 twice and counted it twice in the saving ("separate runs: 117",
    78 for 2,3); only --layers dropped repeats."""
    from cli_runner import cli

    code, err = cli(capsys, "sweep", *axes, "--data", str(data), "--output", str(tmp_path / "s"),
                    "--model", "no-such-model-folder", "--no-progress")
    assert code == 2 and said in err and "no-such-model-folder" not in err, err


def test_plot_of_layers_that_are_one_layer_of_the_model_is_refused_before_the_sweep(tiny, data: Path,
                                                                                    tmp_path: Path, capsys) -> None:
    """`--layers 4,-1` on a model of 4 layers is one layer, known only once the model is read: refused before
    any batch is computed, instead of a sweep that ends without its figure."""
    pytest.importorskip("matplotlib")  # two layers given: the figure is planned, and matplotlib checked, before
    from cli_runner import cli

    code, err = cli(capsys, "sweep", "--method", "mean", "--layers", "4,-1", "--plot", "--data", str(data),
                    "--output", str(tmp_path / "s"), "--model", tiny.source, "--no-progress")
    assert code == 2 and "a curve needs two or more points" in err, err
    assert not list(tmp_path.iterdir())


ALTERATIONS = [  # (method, options, axes, what to alter, how): each breaks the method's own step or pooling
    ("tp", {"start": 1}, {"layer": [3, 4], "end": [2, 3]}, "minidecoder.methods.tp.CopyRows.before",
     lambda original: lambda self, i, h: original(self, i, h) * 1.5 if i in self.blocks else h),
    ("cp", {}, {"layer": [4], "steer_layer": [1, 2], "alpha": [0.5]}, "minidecoder.methods.cp.steer",
     lambda original: lambda a, b, mode, alpha: original(a, b, mode, alpha) + 0.3 * a),
    ("prompteol", {}, {"layer": [2, 4]}, "minidecoder.methods.reading.LastTokenPrompt.pool",
     lambda original: lambda self, h, batch: original(self, h, batch) + h[:, 0]),
]


@pytest.mark.parametrize("name,options,axes,target,alter", ALTERATIONS, ids=[a[0] for a in ALTERATIONS])
def test_sweep_runs_the_methods_own_step(tiny, data: Path, monkeypatch, name, options, axes, target, alter) -> None:
    """Altering a method's step (or pooling) changes its embedding and its sweep's alike: the sweep forks
    the method's own code, it does not restate it."""
    import importlib

    from minidecoder.evaluation.sweep import embed_grid

    method = build_method(name, **options)
    (dev,) = load_tasks(["STSBenchmark-dev"], data)
    sentences = unique_sentences([dev])
    points = grid_points(axes)

    def vectors() -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        swept, _ = embed_grid(tiny, method, points, sentences, batch_size=BATCH, progress=False)
        alone = [minidecoder.embed(tiny, sentences, method_at(method, p), batch_size=BATCH) for p in points]
        return swept, alone

    swept, alone = vectors()
    module_name, _, attribute = target.rpartition(".")
    try:
        owner = importlib.import_module(module_name)
    except ModuleNotFoundError:  # a method of a class: module.Class.method
        module_name, _, cls = module_name.rpartition(".")
        owner = getattr(importlib.import_module(module_name), cls)
    monkeypatch.setattr(owner, attribute, alter(getattr(owner, attribute)))
    swept_altered, alone_altered = vectors()
    for k, point in enumerate(points):
        assert not torch.allclose(alone[k], alone_altered[k]), point  # the alteration changes the embedding ...
        assert not torch.allclose(swept[k], swept_altered[k]), point  # ... and the sweep's,
        torch.testing.assert_close(swept_altered[k], alone_altered[k], atol=1e-5, rtol=1e-5)  # to the same vector


def test_plot_sweep_from_python_refuses_a_sweep_with_one_value_per_axis(tmp_path: Path) -> None:
    """Found: `plot_sweep` of a one-value sweep returned [] and wrote nothing, silently (only the CLI refused)."""
    from minidecoder.evaluation.report import plot_sweep

    sweep = {"method": {"method": "mean"}, "axes": {"layer": [2]}, "points": [{"options": {"layer": 2}, "score": 0.5}],
             "best": {"options": {"layer": 2}, "score": 0.5}}
    with pytest.raises(InputError, match=r"one value per option \(layer=\[2\]\), so there is no curve to draw"):
        plot_sweep(sweep, tmp_path / "s")
    assert not list(tmp_path.iterdir())


def test_the_block_counter_counts_its_own_threads_work_only(tiny) -> None:
    """Found: a sweep's counter is a hook on the model's blocks, so another thread embedding on the same model
    meanwhile was counted as the sweep's work, and the report understated what sharing saved."""
    import threading

    texts = ["a man plays a guitar.", "a chef cooks."]
    with BlockCounter(tiny) as alone:
        minidecoder.embed(tiny, texts, "prompteol", batch_size=BATCH)
    with BlockCounter(tiny) as counter:
        other = threading.Thread(target=minidecoder.embed, args=(tiny, texts * 3, "mean"))
        other.start()
        other.join()
        minidecoder.embed(tiny, texts, "prompteol", batch_size=BATCH)
    assert alone.count > 0 and counter.count == alone.count


@pytest.mark.parametrize("batch_size", [0, -2, 2.5])
def test_a_sweeps_batch_size_from_python_is_checked(tiny, batch_size) -> None:
    """Found: `sweep_sts(..., batch_size=-2)` made no batch and returned, silently; 0 and 2.5 failed inside
    `range`."""
    from minidecoder.errors import ArgumentTypeError

    with pytest.raises(ArgumentTypeError, match=r"batch_size=.* must be a positive whole number of sentences"):
        sweep_sts(tiny, build_method("mean"), {"layer": [1, 2]}, limit=20, batch_size=batch_size, progress=False)



def test_a_grid_axis_of_no_values_is_named(tiny) -> None:
    """Found: `sweep_sts(..., {"layer": []})` failed as an IndexError (the first refusal of a grid of no point)."""
    from minidecoder.errors import InputError

    with pytest.raises(InputError, match=r"the grid's axis layer has no values: there is no point to sweep"):
        sweep_sts(tiny, build_method("mean"), {"layer": []}, limit=20, progress=False)
