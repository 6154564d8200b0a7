"""The frozen problem descriptor: the live device's facts and a call's static bounds.

ProblemKey is the only input to selection and the key of the config cache.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

from .errors import InputError


def _no_gpu(device: torch.device) -> InputError:
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else (
        f"ROCm {torch.version.hip}" if getattr(torch.version, "hip", None) else "CPU-only")
    return InputError(f"device {device} needs a GPU, but torch {torch.__version__} ({build}) sees none; "
                      "pass device='cpu' (the Triton interpreter) or use a CUDA / ROCm build of torch")


@functools.cache
def device_facts(device: torch.device) -> tuple[str, int]:
    """(arch, compute units) of a device: 'sm_90' / 'gfx950' / ..., or ('cpu', 1)."""
    if device.type == "cpu":
        return "cpu", 1
    if not torch.cuda.is_available():  # torch's own AssertionError would not say what to do
        raise _no_gpu(device)
    props = torch.cuda.get_device_properties(device)
    if getattr(torch.version, "hip", None):
        arch = props.gcnArchName.split(":")[0]
    else:
        arch = f"sm_{props.major}{props.minor}"
    return arch, props.multi_processor_count


def normalize_device(device) -> torch.device:
    """A torch.device from a device, a string ('cuda', 'cuda:1', 'cpu') or a GPU index."""
    if isinstance(device, int):
        device = torch.device("cuda", device)
    device = torch.device(device)
    if device.type not in ("cpu", "cuda"):
        raise InputError(f"device must be a CUDA/ROCm GPU or the CPU; got {device}")
    if device.type == "cuda" and device.index is None:
        if not torch.cuda.is_available():
            raise _no_gpu(device)
        device = torch.device("cuda", torch.cuda.current_device())
    return device


@dataclass(frozen=True)
class ProblemKey:
    """Everything selection may look at: the device's arch and the call's static bounds.

    `batch_invariant`: only canonical instances may serve (docs/numerics.md, "Canonical and
    non-canonical instances"); False lets the fastest instance within the tolerance serve."""

    device: torch.device
    arch: str
    cu_num: int
    heads: int
    head_dim: int
    page_size: int
    pages_per_block: int
    gather: bool
    max_rows: int
    max_seqs: int
    max_qlen: int
    max_seq_len: int
    batch_invariant: bool = False

    @property
    def block_table_width(self) -> int:
        return math.ceil(self.max_seq_len / (self.page_size * self.pages_per_block))

    def __repr__(self) -> str:
        g = ", gather" if self.gather else ""
        bi = ", batch-invariant" if self.batch_invariant else ""
        return (f"{self.arch}/{self.cu_num}: H{self.heads} D{self.head_dim} page {self.page_size}"
                f"x{self.pages_per_block}{g}, rows<={self.max_rows} seqs<={self.max_seqs} "
                f"qlen<={self.max_qlen} seq_len<={self.max_seq_len}{bi}")
