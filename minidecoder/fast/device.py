"""Host-to-device moves that never make the host wait: a tensor bound for a GPU is copied from page-locked
(pinned) memory without blocking, so the Python loop runs ahead of the GPU. On a CPU (or `meta`) a move is
the tensor itself or a plain `.to`. And the way back (`to_host_later`): a copy into pinned memory with the
event that says it landed, both on the tensor's own device, whichever device is current."""
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


def to_host_later(tensor: torch.Tensor) -> tuple[torch.Tensor, "torch.cuda.Event"]:
    """`tensor` (on a GPU) copied as float32 into pinned host memory without blocking, and the event that
    marks the copy done. Both are queued on the current stream of the tensor's device: an event recorded on
    the current device's stream (cuda:0 while the model is on cuda:1) would say nothing about the copy, and
    the host could read the rows before they land."""
    with torch.cuda.device(tensor.device):
        host = torch.empty(tensor.shape, dtype=torch.float32, pin_memory=True)
        host.copy_(tensor.float(), non_blocking=True)
        done = torch.cuda.Event()
        done.record(torch.cuda.current_stream(tensor.device))
    return host, done
