"""Which device a command runs on, and the Triton interpreter for the CPU (cli.py and
tuning/commands.py share these).

On the CPU, Triton kernels run only through the interpreter, so a CPU command sets
TRITON_INTERPRET=1 before triton is imported: Triton reads it when it decorates a kernel, its
own library's included (the package imports triton and its kernels lazily, on first use).
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

_TRUE = ("1", "true", "yes", "on", "y")


def interpret_on() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in _TRUE


def use_interpreter(why: str) -> None:
    """Switch Triton to its interpreter; must happen before triton is imported."""
    if "triton" in sys.modules and not interpret_on():
        raise SystemExit("error: triton was already imported without TRITON_INTERPRET=1; "
                         "set it in the environment to run on the CPU")
    if not interpret_on():
        print(f"{why}: device cpu, so setting TRITON_INTERPRET=1 (Triton kernels run on the CPU only "
              "through its interpreter)", file=sys.stderr)
    os.environ["TRITON_INTERPRET"] = "1"


def parse_device(name: str | None, parser: argparse.ArgumentParser) -> torch.device:
    """The torch device for --device (default: cuda if present, else cpu); parser.error if bad."""
    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as e:
        parser.error(f"--device: {e}")
    if device.type not in ("cpu", "cuda"):
        parser.error(f"--device must be cpu or cuda[:N]; got {name!r}")
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {name}: torch sees no CUDA/ROCm device here (torch {torch.__version__})")
    return device


def command_device(name: str | None, parser: argparse.ArgumentParser) -> torch.device:
    """parse_device, and on the CPU the interpreter switched on (named after the command)."""
    device = parse_device(name, parser)
    if device.type == "cpu":
        use_interpreter(parser.prog)
    return device
