import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mqa_logits_mxfp4.formats import (
    E2M1_VALUES, as_uint8, dequantize_mxfp4, e2m1_decode, e2m1_encode, e8m0_to_float, pack_e2m1,
    quantize_mxfp4, unpack_e2m1,
)


def e2m1_by_bits(code: int) -> float:
    """Independent decode from the bit fields: sign | 2-bit exponent (bias 1) | 1-bit mantissa."""
    sign = -1.0 if code & 8 else 1.0
    exp, man = (code >> 1) & 3, code & 1
    mag = man * 0.5 if exp == 0 else 2.0 ** (exp - 1) * (1 + man / 2)
    return sign * mag


def test_value_table():
    assert E2M1_VALUES.dtype == torch.float32
    assert E2M1_VALUES.tolist() == [e2m1_by_bits(c) for c in range(16)]
    assert math.copysign(1.0, E2M1_VALUES[8].item()) == -1.0


def test_every_packed_byte_decodes():
    packed = torch.arange(256, dtype=torch.uint8).unsqueeze(1)
    values = e2m1_decode(unpack_e2m1(packed))
    assert values.shape == (256, 2) and values.dtype == torch.float32
    for byte in range(256):
        assert values[byte].tolist() == [e2m1_by_bits(byte & 0xF), e2m1_by_bits(byte >> 4)]


def test_pack_unpack_round_trip():
    codes = torch.randint(0, 16, (3, 5, 64), dtype=torch.uint8)
    packed = pack_e2m1(codes)
    assert packed.shape == (3, 5, 32)
    assert torch.equal(unpack_e2m1(packed), codes)
    assert packed[0, 0, 0].item() == codes[0, 0, 0].item() | (codes[0, 0, 1].item() << 4)
    with pytest.raises(ValueError, match="even"):
        pack_e2m1(codes[..., :3])


def test_e8m0_every_byte():
    scales = torch.arange(256, dtype=torch.uint8)
    f64 = e8m0_to_float(scales, torch.float64)
    f32 = e8m0_to_float(scales)
    assert f32.dtype == torch.float32 and f64.dtype == torch.float64
    for e in range(255):
        assert f64[e].item() == math.ldexp(1.0, e - 127)
        assert f32[e].item() == math.ldexp(1.0, e - 127)  # 2^-127 is a float32 subnormal
    assert math.isnan(f64[255].item()) and math.isnan(f32[255].item())


def test_as_uint8():
    raw = torch.tensor([1, 2, 255], dtype=torch.uint8)
    assert as_uint8(raw) is raw
    for name in ("float4_e2m1fn_x2", "float8_e8m0fnu"):
        if hasattr(torch, name):
            view = raw.view(getattr(torch, name))
            assert torch.equal(as_uint8(view), raw)
    with pytest.raises(TypeError, match="float32"):
        as_uint8(raw.float())
    if hasattr(torch, "float8_e8m0fnu"):
        viewed = e8m0_to_float(raw.view(torch.float8_e8m0fnu))
        assert torch.allclose(viewed, e8m0_to_float(raw), rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("x, code", [
    (0.25, 0), (0.75, 2), (1.25, 2), (1.75, 4), (2.5, 4), (3.5, 6), (5.0, 6),
    (0.2500001, 1), (0.7499999, 1), (4.9999, 6), (5.0001, 7), (-0.25, 8), (-5.0, 14), (-1.75, 12),
])
def test_encode_ties_to_even_code(x, code):
    assert e2m1_encode(torch.tensor([x], dtype=torch.float64)).item() == code


def test_encode_saturates_and_keeps_sign_of_zero():
    x = torch.tensor([6.0, 7.0, 100.0, -1e30, 0.0, -0.0], dtype=torch.float64)
    assert e2m1_encode(x).tolist() == [7, 7, 7, 15, 0, 8]


def test_round_trip_of_representable_values_is_exact():
    codes = torch.randint(0, 16, (4, 8, 128), dtype=torch.uint8)
    codes[..., ::32] = 7  # +6 in every block pins the scale
    scales = torch.randint(1, 255, (4, 8, 4), dtype=torch.uint8)
    x = dequantize_mxfp4(pack_e2m1(codes), scales, torch.float64)
    packed, got_scales = quantize_mxfp4(x)
    assert torch.equal(got_scales, scales)
    assert torch.equal(unpack_e2m1(packed), codes)
    # Without the pin the scale may shrink, but the values survive.
    x2 = dequantize_mxfp4(pack_e2m1(torch.randint(0, 16, (64, 32), dtype=torch.uint8)),
                          torch.randint(1, 255, (64, 1), dtype=torch.uint8), torch.float64)
    assert torch.equal(dequantize_mxfp4(*quantize_mxfp4(x2), torch.float64), x2)


@pytest.mark.parametrize("k", [-127, -5, 0, 3, 127])
def test_scale_rule_at_powers_of_two(k):
    amax = 6 * 2.0 ** k
    for value, byte in ((amax, 127 + k), (amax * (1 + 2 ** -50), min(254, 128 + k)), (amax * 0.9, 127 + k)):
        x = torch.zeros(32, dtype=torch.float64)
        x[5] = -value
        packed, scales = quantize_mxfp4(x)
        assert scales.tolist() == [byte], value


def test_scale_rule_clamps_and_zero_block():
    x = torch.zeros(4, 32, dtype=torch.float64)
    x[1, 0] = 1e-300  # below 6 * 2^-127: scale clamps to 2^-127 and the value rounds to 0
    x[2, 0] = 6 * 2.0 ** 130  # above 6 * 2^127: scale clamps to 2^127 and the value saturates
    x[2, 1] = -(2.0 ** 127)
    x[3, 0] = 6 * 2.0 ** -127
    packed, scales = quantize_mxfp4(x)
    assert scales.tolist() == [[127], [0], [254], [0]]
    out = dequantize_mxfp4(packed, scales, torch.float64)
    assert out[0].abs().sum() == 0 and out[1].abs().sum() == 0
    assert out[2, 0] == 6 * 2.0 ** 127 and out[2, 1] == -(2.0 ** 127)
    assert out[3, 0] == x[3, 0]


def test_non_finite_blocks_get_nan_scale():
    x = torch.randn(3, 64)
    x[0, 40] = torch.nan
    x[2, 3] = -torch.inf
    packed, scales = quantize_mxfp4(x)
    assert scales[0, 1] == 0xFF and scales[2, 0] == 0xFF
    assert scales[0, 0] != 0xFF and scales[1].ne(0xFF).all() and scales[2, 1] != 0xFF
    out = dequantize_mxfp4(packed, scales)
    assert out[0, 32:].isnan().all() and out[2, :32].isnan().all()
    assert out[0, :32].isfinite().all() and out[1].isfinite().all()


def test_shapes_and_dtypes():
    x = torch.randn(2, 3, 128, dtype=torch.bfloat16)
    packed, scales = quantize_mxfp4(x)
    assert packed.shape == (2, 3, 64) and packed.dtype == torch.uint8
    assert scales.shape == (2, 3, 4) and scales.dtype == torch.uint8
    assert dequantize_mxfp4(packed, scales, torch.bfloat16).dtype == torch.bfloat16
    with pytest.raises(ValueError, match="multiple of 32"):
        quantize_mxfp4(torch.randn(48))


def half_spacing(scaled_magnitude: torch.Tensor) -> torch.Tensor:
    """Half the E2M1 grid spacing around |x / scale| in [0, 6]: the worst rounding error."""
    return torch.where(scaled_magnitude < 2, 0.25, torch.where(scaled_magnitude < 4, 0.5, 1.0))


@settings(max_examples=100, deadline=None)
@given(values=st.lists(st.floats(-1e4, 1e4, allow_nan=False, width=32), min_size=64, max_size=64),
       shift=st.integers(-150, 110))
def test_quantization_error_bound(values, shift):
    # Every value lies within +-6 * scale (the scale rule never needs saturation here), and
    # nearest rounding errs by at most half the grid spacing at that value.
    x = torch.tensor(values, dtype=torch.float64) * 2.0 ** shift
    packed, scales = quantize_mxfp4(x)
    scale = e8m0_to_float(scales, torch.float64).repeat_interleave(32)
    err = (dequantize_mxfp4(packed, scales, torch.float64) - x).abs()
    scaled = x.abs() / scale
    assert (scaled <= 6).all()
    assert (err <= half_spacing(scaled) * scale).all()
    # The scale is the smallest power of two that fits (unless clamped at 2^-127).
    amax = x.view(2, 32).abs().amax(1)
    tight = (amax > 0) & (scales != 0)
    assert (amax[tight] > 3 * e8m0_to_float(scales[tight], torch.float64)).all()
