"""Random inputs on which patch holds an apply function against the forms.

An apply function is known by what it does: patch calls it on each probe below and
keeps the results of those it accepts (a Llama-form function refuses caches narrower
than the head, GPT-J's refuses a query and a key...); a form stands in for the
function only if it gives the same result (bits, dtype, shape, strides) on every one
of them.  So the probes are many and varied, as attention modules call these
functions and beyond: queries and keys laid out as attention makes them (``(B, H, L,
D)`` views of ``(B, L, H, D)`` projections), a prefill and a decoding step, caches as
wide as the head, half as wide, a quarter as wide, with and without a batch axis,
``unsqueeze_dim`` 1 and 2, a missing key, more or fewer query tokens than cache rows
(vision prefix tokens, assistant models), vision towers' ``(N, H, D)`` patches, one
tensor alone, GPT-J's ``(tensor, sin, cos)``; in every floating dtype, the caches in
the tensors' dtype or float32.  A form that agrees with a function on all of them
agrees on what the model passes it.
"""

from dataclasses import dataclass, field
from typing import Any, Iterator

import torch

HEAD = 16


@dataclass
class Probe:
    """One call: positional and keyword arguments, and what it stands for."""

    what: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        shapes = ", ".join(_describe(a) for a in self.args)
        extra = "".join(f", {k}={v!r}" for k, v in self.kwargs.items())
        return f"{self.what} ({shapes}{extra})"


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"{tuple(value.shape)} {str(value.dtype).replace('torch.', '')}"
    return repr(value)


# (tensors, caches) dtypes: each floating dtype with caches alike, and the half types with
# float32 caches (OLMo's float32 caches in a bfloat16 model).  Every pair, whatever the
# model's dtype: a swapped global serves every model of the family in the process.
DTYPES = ((torch.float32, torch.float32), (torch.float64, torch.float64),
          (torch.bfloat16, torch.bfloat16), (torch.bfloat16, torch.float32),
          (torch.float16, torch.float16), (torch.float16, torch.float32))


def probes(device: torch.device) -> Iterator[Probe]:
    """Every probe, on ``device``."""
    generator = torch.Generator().manual_seed(0)

    def randn(shape: tuple[int, ...], of: torch.dtype) -> torch.Tensor:
        return torch.randn(shape, generator=generator).to(device=device, dtype=of)

    def heads(batch: int, length: int, count: int, of: torch.dtype) -> torch.Tensor:
        """(B, H, L, D) as attention makes it: a transposed view of (B, L, H, D)."""
        return randn((batch, length, count, HEAD), of).transpose(1, 2)

    for x_dtype, c_dtype in DTYPES:
        def caches(*shape: int) -> tuple[torch.Tensor, torch.Tensor]:
            return randn(shape, c_dtype), randn(shape, c_dtype)  # noqa: B023

        for batch, length in ((2, 5), (1, 1)):
            for width in (HEAD, HEAD // 2, HEAD // 4):
                q, k = heads(batch, length, 3, x_dtype), heads(batch, length, 1, x_dtype)
                cos, sin = caches(batch, length, width)
                yield Probe("query and key", (q, k, cos, sin))
                yield Probe("query alone", (q, None, cos, sin))
                yield Probe("one tensor", (q, cos, sin))
                cos2, sin2 = caches(length, width)
                yield Probe("caches without a batch axis", (q, k, cos2, sin2))
                q2 = randn((batch, length, 3, HEAD), x_dtype)
                k2 = randn((batch, length, 1, HEAD), x_dtype)
                yield Probe("heads second to last", (q2, k2, cos, sin), {"unsqueeze_dim": 2})
                if width < HEAD:  # GPT-J: (B, L, H, r) slices, half-width caches
                    sin_r, cos_r = caches(batch, length, width // 2)
                    yield Probe("GPT-J's tensor, sin, cos", (q2[..., :width], sin_r, cos_r))
        for extra in (2, -2):  # vision prefix tokens; an assistant's shorter query
            q, k = heads(1, 5 + extra, 3, x_dtype), heads(1, 5, 1, x_dtype)
            cos, sin = caches(1, 5, HEAD)
            yield Probe("a query of another length", (q, k, cos, sin))
            cos2, sin2 = caches(5, HEAD)
            yield Probe("a query of another length", (q, k, cos2, sin2))
        for patches in (7, 1):  # vision towers: (N, H, D) views of a fused projection
            qkv = randn((patches, 3, 3, HEAD), x_dtype).permute(1, 0, 2, 3).unbind(0)
            for width in (HEAD, HEAD // 2):
                cos, sin = caches(patches, width)
                yield Probe("vision patches", (qkv[0], qkv[1], cos, sin))
