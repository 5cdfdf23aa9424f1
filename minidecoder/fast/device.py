"""Host-to-device moves that never make the host wait: a tensor bound for a GPU is copied from page-locked
(pinned) memory without blocking, so the Python loop runs ahead of the GPU. On a CPU (or `meta`) a move is
the tensor itself or a plain `.to`."""
from __future__ import annotations

import torch


def pinned(tensor: torch.Tensor | None, device: torch.device) -> torch.Tensor | None:
    """`tensor` (on the host) in page-locked memory when it is bound for a GPU, so that a non-blocking copy
    of it is truly asynchronous; otherwise the tensor itself."""
    if tensor is None or device.type != "cuda" or tensor.device.type != "cpu":
        return tensor
    return tensor.pin_memory()


def to_device(tensor: torch.Tensor | None, device: torch.device) -> torch.Tensor | None:
    """`tensor` on `device`, copied from pinned memory without blocking where it goes to a GPU."""
    if tensor is None or tensor.device == device:
        return tensor
    return pinned(tensor, device).to(device, non_blocking=True)
