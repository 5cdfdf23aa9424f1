"""Run one checkpoint through minidecoder and transformers side by side and name the first layer and
site where they diverge.

    python tools/layer_diff.py weights/smollm2-135m-instruct --prompt "The capital of France is"
    python tools/layer_diff.py FOLDER --dtype bfloat16 --tolerance 1e-2

Sites compared per block (TransformerLens names): attn_out (the attention branch added to the
residual, after Gemma's post-attention norm), mlp_out (likewise), resid_post (the block's output);
then the final norm and the logits. transformers is a tool-only dependency here (`pip install
minidecoder[test]`); the library itself never imports it.
"""
from __future__ import annotations

import argparse
import sys

import torch


def transformers_sites(model, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-block outputs captured with forward hooks on transformers' modules."""
    sites, handles = {}, []
    layers = model.model.layers
    for i, layer in enumerate(layers):
        def save(name):
            return lambda module, args, output: sites.__setitem__(name, output[0] if isinstance(output, tuple)
                                                                  else output)
        attn_norm = getattr(layer, "post_attention_layernorm", None) if hasattr(layer, "pre_feedforward_layernorm") \
            else None
        handles.append((attn_norm or layer.self_attn).register_forward_hook(save(f"block {i}: attn_out")))
        mlp_norm = getattr(layer, "post_feedforward_layernorm", None)
        handles.append((mlp_norm or layer.mlp).register_forward_hook(save(f"block {i}: mlp_out")))
        handles.append(layer.register_forward_hook(save(f"block {i}: resid_post")))
    handles.append(model.model.norm.register_forward_hook(save("final norm")))
    with torch.no_grad():
        sites["logits"] = model(ids).logits
    for handle in handles:
        handle.remove()
    return sites


def minidecoder_sites(model, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    from minidecoder.core.model import Sites

    sites = {}
    with torch.no_grad():
        h = model.embed(ids)
        # The explicit attention kernel, as transformers' eager path runs: the fused one differs by float
        # rounding, which on residuals of 1e4 (SmolLM2's last blocks) passes any useful tolerance.
        ctx = model.context(None, ids.shape[1], ids.shape[0], explicit_attention=True)
        for i, block in enumerate(model.layers):
            record = Sites(record={"attn_out", "mlp_out", "resid_post"})
            h = block(h, ctx, record)
            for name in ("attn_out", "mlp_out", "resid_post"):
                sites[f"block {i}: {name}"] = record.store[name]
        h = model.norm(h)
        sites["final norm"] = h
        sites["logits"] = model.unembed(h)
    return sites


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", help="a Hugging Face checkpoint folder (config.json + safetensors)")
    parser.add_argument("--prompt", default="The capital of France is")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--tolerance", type=float, default=1e-4)
    args = parser.parse_args(argv)

    import transformers

    import minidecoder

    ours = minidecoder.load(args.folder, dtype=args.dtype)
    theirs = transformers.AutoModelForCausalLM.from_pretrained(args.folder, dtype=getattr(torch, args.dtype),
                                                               attn_implementation="eager").eval()
    ids = torch.tensor([ours.tokenizer.encode(args.prompt)])
    a, b = minidecoder_sites(ours, ids), transformers_sites(theirs, ids)
    first = None
    for name in a:
        diff = (a[name].float() - b[name].float()).abs().max().item()
        flag = "  <-- first divergence" if diff > args.tolerance and first is None else ""
        if flag:
            first = name
        print(f"{name:28s} max |diff| = {diff:.3e}{flag}")
    print(f"\nfirst site above {args.tolerance:g}: {first}" if first else
          f"\nall {len(a)} sites agree within {args.tolerance:g}")
    return 1 if first else 0


if __name__ == "__main__":
    sys.exit(main())
