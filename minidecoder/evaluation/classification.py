"""MTEB classification (HTP Table 12) on Banking77 and Emotion, by the installed mteb's own evaluator.

    data = load_classification_set("Emotion")
    results = evaluate_classification(encode, data, instruction=INSTRUCTIONS["Emotion"])

Nothing of the protocol is restated here: the task is mteb's own class (`Banking77Classification`,
`EmotionClassification`: their `samples_per_label`, `n_experiments`, seed and `LogisticRegression(max_iter=100)`)
fed the local files (`mteb_lookup.local_task`), and its `evaluate` trains and scores as in any MTEB run.
mteb asks for the texts of the train rows its experiments sample and for every test text; `texts_needed`
computes that set with mteb's own sampler, so the embedding job embeds exactly those.

Accuracy x100 is the mean over the experiments. Its 95% interval is over test items: an item's score is
the fraction of experiments that got it right, the mean of those is the accuracy (exactly), and the
items are resampled (`bootstrap.mean_interval`).
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from minidecoder.evaluation.bootstrap import mean_interval
from minidecoder.evaluation.classification_data import ClassificationSet
from minidecoder.evaluation.harness import encode_sentences
from minidecoder.running.texts import with_instruction

Encoder = Callable[[list], torch.Tensor]  # texts (or (context, text) pairs) -> (N, E)


def mteb_task(data: ClassificationSet, instruction: str | None, placement: str = "context"):
    """mteb's task for `data`, its texts carrying `instruction` where it is pooled ("{instruct} {text}"); as
    unpooled context (the default) the task holds the bare texts and the instruction travels beside them."""
    from minidecoder.evaluation.mteb_lookup import local_task

    joined = instruction if placement == "pooled" else None
    return local_task(data.mteb_name, {split: {"text": with_instruction(texts, joined, "pooled"), "label": labels}
                                       for split, (texts, labels) in data.splits.items()})


def texts_needed(data: ClassificationSet, instruction: str | None, placement: str = "context") -> list:
    """The texts mteb's evaluation will ask for: the train rows its experiments sample (by mteb's own
    `_undersample_data`, as `_evaluate_subset` calls it) and every test text; as (instruction, text) pairs
    where the instruction is unpooled context (running.texts.with_instruction)."""
    with_instruction([], instruction, placement)  # an unknown placement fails before mteb's work
    task = mteb_task(data, instruction, placement)
    task.load_data()
    train = task.dataset[task.train_split]
    chosen: set[int] = set()
    shuffled = None
    for i in range(task.n_experiments):
        _, shuffled, selected = task._undersample_data(train, i, shuffled)
        chosen.update(selected)
    texts = [train["text"][i] for i in sorted(chosen)] + list(task.dataset["test"]["text"])
    return texts if placement == "pooled" else with_instruction(texts, instruction, placement)


def evaluate_classification(encode: Encoder, data: ClassificationSet, instruction: str | None = None,
                            progress: bool = True, chunk_size: int = 256, placement: str = "context") -> dict:
    """Run mteb's classification evaluator on `data` with `encode`'s embeddings. Returns {"task", "accuracy":
    {"score", "ci95"}, "f1": ..., "n_experiments", "samples_per_label", "experiments": mteb's per-experiment
    scores, "test_items", "instruction", "instruction_placement", plus the stamp's data facts}; scores x100."""
    from minidecoder.evaluation.mteb_lookup import PrecomputedEncoder

    texts = texts_needed(data, instruction, placement)
    vectors = encode_sentences(encode, texts, chunk_size=chunk_size, progress=progress)  # (N, E)
    task = mteb_task(data, instruction, placement)
    asked = [text[1] if isinstance(text, tuple) else text for text in texts]  # what mteb's task holds and asks for
    scores = task.evaluate(PrecomputedEncoder(asked, vectors), "test", encode_kwargs={"batch_size": 256})["default"]
    gold = np.asarray(data.splits["test"][1])
    right = (np.asarray(task.predictions) == gold).mean(axis=0)  # (items,): fraction of experiments right
    return {
        "task": data.name,
        "mteb_task": data.mteb_name,
        "main_score": "accuracy",
        "accuracy": {"score": 100.0 * scores["accuracy"], "ci95": mean_interval(100.0 * right)},
        "f1": {"score": 100.0 * scores["f1"]},
        "n_experiments": task.n_experiments,
        "samples_per_label": task.samples_per_label,
        "seed": task.seed,
        "classifier": repr(task.evaluator_model),
        "experiments": scores["scores_per_experiment"],
        "test_items": len(gold),
        "per_item": (100.0 * right).tolist(),  # each test item's accuracy x100 over the experiments (paired intervals)
        "train_texts_embedded": len(texts) - len(gold),
        "instruction": instruction,
        "instruction_placement": placement if instruction else None,
        "limit": data.limit,
        "data_dir": str(data.data_dir),
        "data_files": data.files,
    }
