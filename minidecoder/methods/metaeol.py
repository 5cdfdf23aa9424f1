"""MetaEOL: the average of eight meta-task prompts' last-token embeddings.

Lei et al., "Meta-Task Prompting Elicits Embeddings from Large Language Models" (arXiv 2402.18458):
each prompt frames the sentence for one task (categorization, opinion vs fact, sentiment, emotion,
paraphrase, contextual synonym, key fact, entities/relations) and ends in the PromptEOL-style
"... in one word:\""; the sentence embedding is the mean of the eight last-token states.
Code: Yibin-Lei/MetaEOL, `evaluation.py` (`task_prompts` for `--prompt_method metaeol`; `batcher`:
`hidden_states[-1][:, -1, :]` then `.view(-1, 8, E).mean(dim=1)`), text prepared by the SentEval
batcher steps (`senteval_text=True`). The eight prompt strings are in `minidecoder.methods.prompts`.

Numerics: the reference put all 8 x B prompts of a batch into one left-padded forward; minidecoder
runs one forward per prompt (`reading.ReadsOneLayer`; CP's CK does the same), so rows are
padded only against the same prompt. Padding does not change an embedding beyond float tolerance
(tests/methods/test_methods_invariants.py), so the two agree to that tolerance.
"""
from __future__ import annotations

import dataclasses

import torch

from minidecoder.errors import InputError
from minidecoder.methods.base import check_bool, option, register
from minidecoder.methods.inputs import PromptBatch
from minidecoder.methods.loop import last_token
from minidecoder.methods.prompts import METAEOL_TEMPLATES
from minidecoder.methods.reading import ReadsOneLayer
from minidecoder.methods.text import PIECES_HELP, SENTEVAL_HELP

@register
@dataclasses.dataclass
class MetaEOL(ReadsOneLayer):
    name = "metaeol"
    summary = "MetaEOL (Lei et al. 2024): mean of the last-token embeddings of 8 meta-task prompts (8 forwards)"
    layer: int = option(-1, "output layer (hidden_states index); the reference reads -1, the final normed output")
    senteval_text: bool = option(True, SENTEVAL_HELP)
    pieces: bool = option(False, PIECES_HELP)
    tasks: list = option(list(range(len(METAEOL_TEMPLATES))),
                         "which of the 8 prompts to average (0-based indices into METAEOL_TEMPLATES); all by default")

    def __post_init__(self) -> None:
        check_bool(self.senteval_text, "senteval_text")
        check_bool(self.pieces, "pieces")
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

    def reads_empty_text(self) -> bool:
        return True  # each prompt's last token exists around an empty text
