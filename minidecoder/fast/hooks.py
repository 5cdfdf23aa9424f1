"""A block's hooks around a fast path's own call of it: `nn.Module.__call__` runs a module's forward pre-hooks
and forward hooks around `forward`; a fast path that runs the block by other means (the compiled
`Block.forward`, fast.compiled) skips `__call__`, so it runs them here, the same way: a pre-hook's return
replaces the inputs, a forward hook's the output. Hooks of the kinds only `__call__` knows how to run (global
ones, ones taking keyword arguments, ones called even when the forward raises, backward ones) send the
call through `__call__` itself, with the plain forward.

The sweep's block counter (`evaluation.sweep.BlockCounter`) is a pre-hook; a user's probe is often a
forward hook (`register_forward_hook`)."""
from __future__ import annotations

from collections.abc import Callable

import torch

from minidecoder.core.model import Block, Context


def with_block_hooks(block: Block, run: Callable[..., torch.Tensor], x: torch.Tensor, ctx: Context) -> torch.Tensor:
    """`run(x, ctx)` (a fast path's `block(x, ctx)`) with the block's hooks around it, as `block(x, ctx)`
    would run them; `block(x, ctx)` itself where a hook is of a kind only `__call__` runs."""
    if _has_other_hooks(block):
        return block(x, ctx)
    args = (x, ctx)
    for hook in block._forward_pre_hooks.values():
        replaced = hook(block, args)
        if replaced is not None:
            args = replaced if isinstance(replaced, tuple) else (replaced,)
    out = run(*args)
    for hook in block._forward_hooks.values():
        replaced = hook(block, args, out)
        if replaced is not None:
            out = replaced
    return out


def _has_other_hooks(block: Block) -> bool:
    """Hooks beyond a block's plain pre- and forward hooks: global ones, ones taking keyword arguments, ones
    called even when the forward raises, backward ones."""
    from torch.nn.modules import module as nn_module

    return bool(nn_module._global_forward_hooks or nn_module._global_forward_pre_hooks
                or nn_module._global_backward_hooks or nn_module._global_backward_pre_hooks
                or block._forward_pre_hooks_with_kwargs or block._forward_hooks_with_kwargs
                or block._forward_hooks_always_called or block._backward_hooks or block._backward_pre_hooks)
