"""MTEB STS tasks built in the tests from sentence pairs (nothing read from the Hub or downloaded)."""
from __future__ import annotations


def local_sts_task(name: str, sentence1: list[str], sentence2: list[str], scores: list[float],
                   description: str = "pairs built in the test"):
    """An MTEB STS task (test split, cosine Spearman) over the pairs given."""
    from datasets import Dataset, DatasetDict
    from mteb.abstasks.sts import AbsTaskSTS
    from mteb.abstasks.task_metadata import TaskMetadata

    class LocalSTS(AbsTaskSTS):
        metadata = TaskMetadata(
            name=name, type="STS", main_score="cosine_spearman", category="t2t", description=description,
            reference="https://ixa2.si.ehu.eus/stswiki", dataset={"path": f"local/{name}", "revision": "local"},
            eval_splits=["test"], eval_langs=["eng-Latn"], date=("2017-01-01", "2017-12-31"), dialect=["Written"],
            domains=[], task_subtypes=[], license="cc-by-sa-4.0", annotations_creators="human-annotated",
            modalities=["text"], sample_creation="found", bibtex_citation="")
        min_score = 0
        max_score = 5

        def load_data(self, num_proc=None, **kwargs) -> None:
            self.dataset = DatasetDict({"test": Dataset.from_dict(
                {"sentence1": sentence1, "sentence2": sentence2, "score": scores})})
            self.data_loaded = True

    return LocalSTS()
