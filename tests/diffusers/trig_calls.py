"""The cos and sin calls of sinpe's inline forms, recorded, for the tests that hold each
to its angle in double (tests/test_diffusers_inline.py, tests/test_diffusers_sources.py)."""
from __future__ import annotations

import torch

from sinpe.torch.patching import _inline

HALF_ULP = 2.0**-25 + 2.0**-30  # half a float32 ulp of values up to 1, and the promise's 2**-30


def recorded(monkeypatch) -> list:
    """The ExactTrig modes made from now on (a list filled as they are), each recording
    its calls: ``(angle, cosine, exact, own)``."""
    modes = []
    original = _inline.ExactTrig.__init__

    def recording(self, record=False, per_call=None, pairs=None):
        original(self, True, per_call, pairs)
        modes.append(self)
    monkeypatch.setattr(_inline.ExactTrig, "__init__", recording)
    return modes


def held_to_a_rotary_table(modes: list, inv_freq: torch.Tensor, count: int) -> None:
    """Each of ``count`` recorded calls took the cos or sin of ``cat(outer(arange(n),
    inv_freq))`` (n its rows, a heads axis of 1 after them) within half an ulp of that
    angle in double, where the code's own value is more than eight times that off."""
    calls = [c for mode in modes for c in mode.calls]
    assert len(calls) == count
    n = calls[0][0].shape[0]
    table = torch.arange(n, dtype=torch.float64)[:, None] * inv_freq.double()
    angle = torch.cat([table, table], -1).unsqueeze(1)  # (positions, 1, rotated channels)
    for _, cosine, exact, own in calls:
        want = angle.cos() if cosine else angle.sin()
        assert exact.shape == want.shape
        assert float((exact.double() - want).abs().max()) <= HALF_ULP
        assert float((own.double() - want).abs().max()) > 8 * HALF_ULP
