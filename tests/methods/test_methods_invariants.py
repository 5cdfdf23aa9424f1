"""Padding and batch composition do not change an embedding beyond float tolerance (docs/spec.md section 2).

Rows are left-padded and positions are derived from the mask, so a padded row sees exactly its own
tokens at its own positions; what remains is float rounding from different matrix shapes (and, on
Llama, the shared-prefix fast path, which a batch of one row never takes). Checked for every
pooling/prompt method of this project on a plain model (llama), a sliding-window model (Mistral,
window 5 < every prompt) and Gemma2 (window, soft-capping, sandwich norms).
"""
from __future__ import annotations

import pytest

import minidecoder
from test_methods_prompts import close, pair

VARIANTS = ["llama", "mistral_window", "gemma2"]
METHODS = [
    ("mean", {}), ("mean", {"over": "all", "template": 'This sentence : "{text}" means in one word:"'}),
    ("last", {"layer": 2}), ("prompteol", {}), ("pretended_cot", {}), ("knowledge", {}),
    ("prompt", {"template": "Summarize: {text} ->"}), ("metaeol", {"tasks": [0, 4]}),
    ("echo", {}), ("echo", {"pooling": "last"}),
]
SHORT, *OTHERS = ["hi", "a dog runs in the park with a red ball", "two men are talking ?", 'she said "no" twice', "x y"]
TEXTS = [SHORT, *OTHERS]


def ids(param) -> str:
    return param[0] + ("-" + "-".join(f"{k}" for k in param[1]) if param[1] else "")


@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("method", METHODS, ids=[ids(m) for m in METHODS])
def test_padding_and_batch_composition_do_not_change_embeddings(name: str, method: tuple[str, dict]) -> None:
    model, _ = pair(name)
    method_name, options = method
    run = lambda texts, batch_size: minidecoder.embed(model, texts, method_name, batch_size=batch_size, **options)  # noqa: E731
    together = run(TEXTS, len(TEXTS))  # one batch: every row but the longest is left-padded
    alone = [run([text], 1)[0] for text in TEXTS]  # no padding at all
    for row, vector in enumerate(alone):
        close(together[row], vector, msg=f"row {row} padded in a batch vs alone")
    close(run(TEXTS, 2), together, msg="batches of 2 vs one batch")  # other neighbours, other padding
    close(run(TEXTS[::-1], 3).flip(0), together, msg="reversed input order")
