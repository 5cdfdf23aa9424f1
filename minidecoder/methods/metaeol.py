"""MetaEOL: the average of eight meta-task prompts' last-token embeddings.

Lei et al., "Meta-Task Prompting Elicits Embeddings from Large Language Models" (arXiv 2402.18458):
each prompt frames the sentence for one task (categorization, opinion vs fact, sentiment, emotion,
paraphrase, contextual synonym, key fact, entities/relations) and ends in the PromptEOL-style
"... in one word:\""; the sentence embedding is the mean of the eight last-token states.
Code: Yibin-Lei/MetaEOL, `evaluation.py` (`task_prompts` for `--prompt_method metaeol`; `batcher`:
`hidden_states[-1][:, -1, :]` then `.view(-1, 8, E).mean(dim=1)`), text prepared by the SentEval
batcher steps (`senteval_text=True`, as in `prompts.py`).

Numerics: the reference put all 8 x B prompts of a batch into one left-padded forward; minidecoder
runs one forward per prompt (`reading.ReadsOneLayer`; CP's CK does the same), so rows are
padded only against the same prompt. Padding does not change an embedding beyond float tolerance
(tests/methods/test_methods_invariants.py), so the two agree to that tolerance.
"""
from __future__ import annotations

import dataclasses

import torch

from minidecoder.errors import InputError
from minidecoder.methods.base import option, register
from minidecoder.methods.inputs import PromptBatch
from minidecoder.methods.loop import last_token
from minidecoder.methods.prompts import check_bool
from minidecoder.methods.reading import ReadsOneLayer

# The eight prompts, verbatim from Yibin-Lei/MetaEOL `evaluation.py` with `*sent 0*` written `{text}`
# (spec section 3). Order kept: `tasks` indexes this list.
METAEOL_TEMPLATES: list[str] = [
    # task 1: text categorization
    "In this task, you're presented with a text excerpt. Your task is to categorize the excerpt into a broad category such as 'Education', 'Technology', 'Health', 'Business', 'Environment', 'Politics', or 'Culture'. These categories help in organizing content for better accessibility and targeting. For this task, this sentence : \"{text}\" should be classified under one general category in one word:\"",
    # task 2: opinion vs fact
    "In this task, you're given a statement and you need to determine whether it's presenting an 'Opinion' or a 'Fact'. This distinction is vital for information verification, educational purposes, and content analysis. For this task, this sentence : \"{text}\" discriminates between opinion and fact in one word:\"",
    # task 3: sentiment (review rating)
    "In this task, you're given a review from an online platform. Your task is to generate a rating for the product based on the review on a scale of 1-5, where 1 means 'extremely negative' and 5 means 'extremely positive'. For this task, this sentence : \"{text}\" reflects the sentiment in one word:\"",
    # task 4: emotion (diary entry)
    "In this task, you're reading a personal diary entry. Your task is to identify the predominant emotion expressed, such as joy, sadness, anger, fear, or love. For this task, this sentence : \"{text}\" conveys the emotion in one word:\"",
    # task 5: paraphrase / semantic similarity
    "In this task, you're presented with two sentences. Your task is to assess whether the sentences convey the same meaning. Use 'identical', 'similar', 'different', or 'unrelated' to describe the relationship. To enhance the performance of this task, this sentence : \"{text}\" means in one word:\"",
    # task 6: contextual synonym
    "In this task, you're given a sentence and a phrase. Your task is to determine if the phrase can be a contextual synonym within the given sentence. Options include 'yes', 'no', or 'partially'. To enhance the performance of this task, this sentence : \"{text}\" means in one word:\"",
    # task 7: key fact (news)
    "In this task, you're examining a news article. Your task is to extract the most critical fact from the article. For this task, this sentence : \"{text}\" encapsulates the key fact in one word:\"",
    # task 8: entities and relations (science)
    "In this task, you're reviewing a scientific abstract. Your task is to identify the main entities (e.g., proteins, diseases) and their relations (e.g., causes, treats). For this task, this sentence : \"{text}\" highlights the primary entity or relation in one word:\"",
]


@register
@dataclasses.dataclass
class MetaEOL(ReadsOneLayer):
    name = "metaeol"
    summary = "MetaEOL (Lei et al. 2024): mean of the last-token embeddings of 8 meta-task prompts (8 forwards)"
    layer: int = option(-1, "output layer (hidden_states index); the reference reads -1, the final normed output")
    senteval_text: bool = option(True, "prepare each text as the SentEval batchers of the references did (append "
                                       "'.', '\"' -> \"'\", final '?' -> '.'); false embeds the text verbatim")
    tasks: list = option(list(range(len(METAEOL_TEMPLATES))),
                         "which of the 8 prompts to average (0-based indices into METAEOL_TEMPLATES); all by default")

    def __post_init__(self) -> None:
        check_bool(self.senteval_text, "senteval_text")
        n = len(METAEOL_TEMPLATES)
        if (not isinstance(self.tasks, (list, tuple)) or not self.tasks
                or any(isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < n for t in self.tasks)
                or len(set(self.tasks)) != len(self.tasks)):
            raise InputError(f"tasks={self.tasks!r} is not a non-empty list of distinct prompt indices 0..{n - 1}",
                             "e.g. tasks=[0,1,2,3,4,5,6,7] (all, the default) or tasks=[4]")

    def templates(self) -> list[str]:
        return [METAEOL_TEMPLATES[t] for t in self.tasks]  # averaged: e = (1/K) sum_k h_last(prompt_k(text))

    def pool(self, h: torch.Tensor, batch: PromptBatch) -> torch.Tensor:
        return last_token(h, batch)  # reference: hidden_states[-1][:, -1, :]
