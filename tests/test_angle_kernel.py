"""The CPU's evaluation of sinpe.torch's exact angle tables: ``_core._angle_values``.

A CPU tensor's positions go to the kernel (``csrc/core/angles.c``); every other device
runs the same integer steps as torch operations (``AngleTables.fixed`` and
``rounded``).  A patched diffusers model promises the same bits on every device, so:

- the kernel's values are the device operations' bits, for integer, float32, float64
  and float16 positions (negative, fractional, tiny, at and beyond the limit, NaN and
  infinite), per pair or broadcast over the pairs, with a scale, in float32 and in the
  16-bit types (rounded to odd in float32 by the kernel, then once to the half type);
- a learned columns form (a timestep embedding) gives the same outputs by the kernel
  as by the device operations;
- the private entry checks what it is given (the tables' dtypes and shapes, the limit,
  the positions): an index computed from a position always lands inside the tables.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import require, require_torch

torch = require_torch()

import sinpe  # noqa: E402
from sinpe.torch import _angles, _tensors  # noqa: E402

RNG = np.random.default_rng(7)
FREQ = 10000.0 ** (-np.arange(48) / 48)


def positions(kind: str, count: int = 2400) -> torch.Tensor:
    if kind == "integer":
        p = torch.from_numpy(RNG.integers(-2**25, 2**25, count))
        p[:120] = torch.arange(120) - 60
        p[120:124] = torch.tensor([2**24, -2**24, 2**24 + 1, -2**63])
        return p
    magnitude = 10.0 ** RNG.uniform(-30, 8, count)
    p = torch.from_numpy(RNG.choice([-1.0, 1.0], count) * magnitude)
    p[:10] = torch.tensor([math.nan, math.inf, -math.inf, 2**24, -2**24 - 1, 0.9999999,
                           1 - 2**-24, 2**-30, -0.0, 1e-45], dtype=torch.float64)
    p[10:100] = torch.from_numpy(RNG.integers(0, 1000, 90) + RNG.integers(0, 64, 90) / 64)
    return p.to({"float32": torch.float32, "float64": torch.float64,
                 "float16": torch.float16}[kind])


def bits(values: torch.Tensor) -> torch.Tensor:
    """The values' bits, every NaN one pattern (the kernel's NaNs and torch's may carry
    other payloads; both are NaN where the position is out of range)."""
    values = torch.where(values.isnan(), torch.full_like(values, math.nan), values)
    return values.view(torch.int16 if values.element_size() == 2 else torch.int32)


@pytest.mark.parametrize("kind", ["integer", "float32", "float64", "float16"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("per_pair", [False, True])
@pytest.mark.parametrize("freq, scale", [(FREQ, 1.0), (FREQ, 0.75), (np.array([3.0, 1e-3]), 1.0)],
                         ids=["schedule", "scaled", "limit-below-2**24"])
def test_the_kernel_gives_the_device_operations_bits(kind, dtype, per_pair, freq, scale,
                                                     monkeypatch):
    monkeypatch.setattr(_tensors, "DEVICE_PATH_FORCED", False)  # the kernel path, whatever
    tables = _angles.AngleTables(freq, scale)  # SINPE_TORCH_PATH says
    p = positions(kind)
    if per_pair:
        p = p[: (len(p) // len(freq)) * len(freq)].reshape(-1, len(freq))
    assert _angles.kernel_reads(p)
    kernel = tables.values(p, dtype, per_pair)
    value, unit = tables.fixed(p, per_pair)  # the device operations, on the CPU
    device = _angles.rounded(value, unit, dtype)
    assert kernel.shape == device.shape and kernel.dtype == device.dtype
    assert torch.equal(bits(kernel), bits(device))
    assert kernel.isnan().any()  # (positions out of range are among them)


def test_a_columns_form_gives_the_same_outputs_by_the_kernel_and_by_device_operations(
        monkeypatch):
    diffusers = require("diffusers")
    import sinpe.torch as st

    module = diffusers.models.embeddings.Timesteps(64, flip_sin_to_cos=True,
                                                   downscale_freq_shift=1)
    timesteps = torch.tensor([999.0, 500.25, 0.5, 3e-4])
    with st.patch(module):
        module(timesteps)  # the first call learns the columns
        kernel = module(timesteps * 0.5)
        monkeypatch.setattr(_tensors, "DEVICE_PATH_FORCED", True)
        device = module(timesteps * 0.5)
    assert torch.equal(kernel, device)


def _arguments(p: np.ndarray, per_pair: bool = False) -> list:
    tables = _angles.AngleTables(FREQ)
    scalings, _, high, low = (t.numpy() for t in tables.on(torch.device("cpu")))
    fractions = tuple(t.numpy() for t in tables.on(torch.device("cpu"), "fraction"))
    return [p, per_pair, high, low, fractions, scalings, tables.limit, False]


@pytest.mark.parametrize("change, error, message", [
    (lambda a: a.__setitem__(0, a[0].astype(np.int32)), TypeError, "positions"),
    (lambda a: a.__setitem__(0, a[0][::2]), TypeError, "positions"),
    (lambda a: a.__setitem__(2, a[2][:-1]), ValueError, "high"),
    (lambda a: a.__setitem__(3, a[3].astype(np.float64)), TypeError, "low"),
    (lambda a: a.__setitem__(4, None), TypeError, "fractions"),
    (lambda a: a.__setitem__(4, a[4][:5]), TypeError, "fractions"),
    (lambda a: a.__setitem__(5, a[5][:3]), ValueError, "scalings"),
    (lambda a: a.__setitem__(6, 2**24 + 1), ValueError, "limit"),
    (lambda a: a.__setitem__(6, -1), ValueError, "limit"),
    (lambda a: a.__setitem__(1, True), ValueError, "pairs"),
    (lambda a: a.__setitem__(2, [1, 2]), TypeError, "high"),
])
def test_the_private_entry_refuses_what_would_index_outside_its_tables(change, error, message):
    arguments = _arguments(np.arange(8, dtype=np.float32))
    change(arguments)
    with pytest.raises(error, match=message):
        sinpe._core._angle_values(*arguments)


def test_the_private_entry_gives_the_shapes_of_its_positions():
    got = sinpe._core._angle_values(*_arguments(np.zeros((2, 3), np.int64)))
    assert got.shape == (2, 3, 48, 2) and got.dtype == np.float32
    got = sinpe._core._angle_values(*_arguments(np.zeros((5, 48), np.float64), True))
    assert got.shape == (5, 48, 2)
    assert sinpe._core._angle_values(*_arguments(np.zeros(0, np.float32))).shape == (0, 48, 2)
