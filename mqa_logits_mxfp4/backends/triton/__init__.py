"""Triton backend: the whole op in Triton (kernels.py) with its host wrapper (backend.py)."""
