"""MXFP4 storage formats: E2M1 element codes (two per byte) and E8M0 block scales.

docs/contract.md ("Formats"). Everything here is plain torch and runs on any device.
"""

from __future__ import annotations

import torch

BLOCK = 32  # elements per E8M0 scale

E2M1_VALUES = torch.tensor(
    [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
     -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0],
    dtype=torch.float32,
)
"""float32 [16]: the value of each E2M1 code; bit 3 is the sign."""

# Rounding thresholds between neighbouring magnitudes (codes c and c + 1). A tie goes to the
# even code, so it rounds down after an even code and up after an odd one.
_MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)

_BYTE_VIEW_DTYPES = tuple(
    getattr(torch, name) for name in ("float4_e2m1fn_x2", "float8_e8m0fnu") if hasattr(torch, name)
)


def as_uint8(t: torch.Tensor) -> torch.Tensor:
    """Bytes of an MXFP4 tensor: uint8 passes through, float4_e2m1fn_x2 / float8_e8m0fnu are viewed."""
    if t.dtype == torch.uint8:
        return t
    if t.dtype in _BYTE_VIEW_DTYPES:
        return t.view(torch.uint8)
    raise TypeError(
        f"MXFP4 data must be uint8 (or a float4_e2m1fn_x2 / float8_e8m0fnu view); got {t.dtype}"
    )


def e2m1_decode(codes: torch.Tensor) -> torch.Tensor:
    """E2M1 codes (uint8, values 0..15, any shape) -> float32 of the same shape."""
    return E2M1_VALUES.to(codes.device)[codes.long()]


def e2m1_encode(x: torch.Tensor) -> torch.Tensor:
    """float tensor -> uint8 E2M1 codes: nearest value, ties to the even code, saturating at +-6.

    The sign bit follows signbit(x), so -0.0 and tiny negatives give code 8 (-0.0).
    NaN gives an arbitrary code (callers mark such blocks with a NaN scale).
    """
    mag = x.abs()
    code = torch.zeros(x.shape, dtype=torch.uint8, device=x.device)
    for c, mid in enumerate(_MIDPOINTS):
        code += (mag > mid) if c % 2 == 0 else (mag >= mid)
    return code | (torch.signbit(x).to(torch.uint8) << 3)


def unpack_e2m1(packed: torch.Tensor) -> torch.Tensor:
    """uint8 [..., D/2] -> uint8 codes [..., D]; the low nibble is the even element."""
    packed = as_uint8(packed)
    return torch.stack((packed & 0xF, packed >> 4), dim=-1).flatten(-2)


def pack_e2m1(codes: torch.Tensor) -> torch.Tensor:
    """uint8 codes [..., D] (D even, values 0..15) -> uint8 [..., D/2]."""
    if codes.shape[-1] % 2:
        raise ValueError(f"pack_e2m1 needs an even last dimension; got {codes.shape[-1]}")
    codes = codes.to(torch.uint8)
    return (codes[..., 0::2] & 0xF) | ((codes[..., 1::2] & 0xF) << 4)


def e8m0_to_float(scales: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """E8M0 bytes (uint8, any shape) -> 2^(e-127) in `dtype`; byte 0xFF -> NaN.

    Built from the float64 bit pattern, so it is exact in float64 for every byte; other dtypes
    round that (float32 holds 2^-127 as a subnormal; narrower types may flush or overflow).
    """
    e = as_uint8(scales).to(torch.int64)
    value = ((e + (1023 - 127)) << 52).view(torch.float64)
    value = torch.where(e == 0xFF, torch.nan, value)
    return value.to(dtype)


def quantize_mxfp4(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """float [..., D] (D % 32 == 0) -> (packed uint8 [..., D/2], scales uint8 [..., D/32]).

    Per 32-block: scale = 2^ceil(log2(amax / 6)) clamped to E8M0's [2^-127, 2^127], so every
    scaled value is within +-6 unless the clamp at 2^127 forces saturation. An all-zero block gets
    byte 127 (scale 1). A block holding NaN or +-Inf gets byte 0xFF (NaN): no scale represents it.
    """
    if x.shape[-1] % BLOCK:
        raise ValueError(f"quantize_mxfp4 needs the last dimension to be a multiple of 32; got {x.shape[-1]}")
    # float64 holds every float32/bf16/fp16 input exactly, and amax / 6 rounds upward past 2^k
    # whenever amax > 6 * 2^k, so the ceil below is exact.
    blocks = x.to(torch.float64).unflatten(-1, (-1, BLOCK))
    finite = torch.isfinite(blocks).all(-1)
    amax = torch.where(torch.isfinite(blocks), blocks.abs(), 0.0).amax(-1)
    mantissa, exponent = torch.frexp(amax / 6)
    log2_ceil = exponent - (mantissa == 0.5).to(exponent.dtype)  # amax / 6 = 2^k exactly -> k
    scale_exp = torch.where(amax > 0, log2_ceil.clamp(-127, 127), 0)
    scale_byte = (scale_exp + 127).to(torch.uint8)
    scaled = blocks / e8m0_to_float(scale_byte, torch.float64).unsqueeze(-1)
    scale_byte = torch.where(finite, scale_byte, 0xFF)
    scaled = torch.where(finite.unsqueeze(-1), scaled, 0.0)
    codes = e2m1_encode(scaled).flatten(-2)
    return pack_e2m1(codes), scale_byte


def dequantize_mxfp4(packed: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """(packed uint8 [..., D/2], scales uint8 [..., D/32]) -> values [..., D] in `dtype`.

    Computed in float64 (exact) and rounded once to `dtype`.
    """
    values = e2m1_decode(unpack_e2m1(packed)).to(torch.float64).unflatten(-1, (-1, BLOCK))
    values = values * e8m0_to_float(scales, torch.float64).unsqueeze(-1)
    return values.flatten(-2).to(dtype)
