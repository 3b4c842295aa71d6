"""The checks sinpe.torch.patch runs before it changes a model: never silently wrong.

- An apply function: sinpe's replacement and the function in force, on random
  inputs of the family's form (queries and keys laid out as attention modules make
  them, a prefill and a decoding step, the model's dtype and float32 for tensors and
  caches), give the same result: bits, dtype, shape, strides and device.
- A rotary module: sinpe's forward and a new HF module of the same class and config
  (as sinpe's starts: without the state dynamic rope keeps from the model's earlier
  calls, with float32 frequencies where ``model.to(dtype)`` cast the model's) give
  caches of the same shape, dtype and device, and values within the float32
  rounding of HF's own angles, at positions short of any switch of dynamic or
  longrope frequencies (which would move the state of sinpe's module).
- GPT-J's sin/cos table: sinpe's has the old one's shape, dtype and device, and its
  values within that rounding, row by row.

Each failure is a ValueError that names the family and what it could not reproduce.
"""

import inspect
from typing import Any, Callable, Iterator

import torch
from torch import nn

_NOT_CHANGED = "the model was not changed"


def _refuse(family: str, what: str, why: str) -> ValueError:
    return ValueError(f"sinpe.torch.patch refuses the {family} family: {what} {why}; "
                      f"{_NOT_CHANGED}")


def _same(got: Any, want: Any) -> bool:
    """Bits, dtype, shape, strides and device; tuples element by element."""
    if isinstance(want, (tuple, list)):
        return (type(got) is type(want) and len(got) == len(want)
                and all(_same(g, w) for g, w in zip(got, want)))
    if not isinstance(want, torch.Tensor) or not isinstance(got, torch.Tensor):
        return got is want
    if (got.dtype != want.dtype or got.shape != want.shape or got.device != want.device
            or got.stride() != want.stride()):
        return False
    if not want.is_floating_point():
        return torch.equal(got, want)
    width = {2: torch.int16, 4: torch.int32, 8: torch.int64}[want.element_size()]
    return torch.equal(got.view(width), want.view(width))


def _probes(form: str, dtype: torch.dtype, device: torch.device
            ) -> Iterator[tuple[Any, ...]]:
    """Random arguments of a form's apply function, as a model's attention passes them."""
    generator = torch.Generator().manual_seed(0)

    def randn(shape: tuple[int, ...], of: torch.dtype) -> torch.Tensor:
        return torch.randn(shape, generator=generator).to(device=device, dtype=of)

    pairs = {(x, c) for x in (dtype, torch.float32) for c in (x, torch.float32)}
    widths = (16, 8) if form in ("neox", "glm", "gptj") else (16,)
    for x_dtype, cache_dtype in sorted(pairs, key=str):
        if form == "vision":  # (N, H, D) views of the fused qkv projection, (N, D) caches
            for patches in (7, 1):
                qkv = randn((patches, 3, 3, 16), x_dtype).permute(1, 0, 2, 3).unbind(0)
                caches = [randn((patches, 16), cache_dtype) for _ in range(2)]
                yield (qkv[0], qkv[1], *caches)
            continue
        for batch, length in ((2, 5), (1, 1)):  # a prefill, a decoding step
            for width in widths:
                caches = [randn((batch, length, width), cache_dtype) for _ in range(2)]
                if form == "gptj":  # (B, L, H, r) slices of the heads, half-width caches
                    tensor = randn((batch, length, 3, 16), x_dtype)[..., :width]
                    sincos = randn((batch, length, width), cache_dtype)
                    yield (tensor, *torch.split(sincos, width // 2, dim=-1))
                    continue
                q = randn((batch, length, 3, 16), x_dtype).transpose(1, 2)
                k = randn((batch, length, 1, 16), x_dtype).transpose(1, 2)
                yield (q, k, *caches)


def check_function(family: str, qualname: str, original: Callable[..., Any],
                   replacement: Callable[..., Any], form: str, dtype: torch.dtype,
                   device: torch.device) -> None:
    """ValueError unless ``replacement`` gives ``original``'s result on every probe."""
    what = f"{qualname} ({form} form)"
    for args in _probes(form, dtype, device):
        try:
            want = original(*args)
        except Exception as exc:
            raise _refuse(family, what, f"raised {exc!r} on a random input of that form") from exc
        try:
            got = replacement(*args)
        except Exception as exc:
            raise _refuse(family, what, f"cannot be reproduced by sinpe's {form} form "
                          f"(it raised {exc!r})") from exc
        if not _same(got, want):
            shapes = ", ".join(f"{tuple(a.shape)} {a.dtype}" for a in args)
            raise _refuse(family, what, f"gives another result than sinpe's {form} form on "
                          f"a random input ({shapes})")


def _tolerance(positions: torch.Tensor, inv_freq: torch.Tensor, scaling: float,
               dtype: torch.dtype) -> torch.Tensor:
    """How far HF's caches may be from exact ones of the same frequencies, per position
    (``positions``: the largest of each cache row, broadcasting against the caches'
    last axis).  HF rounds the angle ``p * w`` to
    float32 (at most ``2**-24 * p * w``), takes float32 cos/sin (within 1 ulp: 2**-23)
    and rounds the product by the attention factor ``s`` (2**-24 relative); each side
    rounds to the output dtype (half an ulp of values up to ``s``: ``s * eps``)."""
    eps = torch.finfo(dtype).eps
    top = float(inv_freq.abs().max())
    angle = positions.double().abs()[..., None] * top * 2.0**-24
    return abs(scaling) * (angle + 2.0**-23 + 2.0**-24) + 2 * max(abs(scaling), 1.0) * eps


def _unswitched_positions(module: nn.Module, layer_type: Any) -> int:
    """How many positions (from 0) the check may give a rotary module without making it
    switch its frequencies (dynamic: beyond ``max_position_embeddings``; longrope: beyond
    ``original_max_position_embeddings``): a switch would change the state of sinpe's
    module before the model runs.  At most 48."""
    limits = [48]
    config = getattr(module, "config", None)
    limits.append(getattr(module, "original_max_seq_len", None)
                  or getattr(config, "max_position_embeddings", None) or 48)
    parameters = getattr(config, "rope_parameters", None) or {}
    if layer_type is not None:
        parameters = parameters.get(layer_type) or {}
    limits.append(parameters.get("original_max_position_embeddings") or 48)
    return max(1, min(int(limit) for limit in limits))


def check_rotary(family: str, name: str, module: nn.Module,
                 forward: Callable[..., Any]) -> None:
    """ValueError unless ``forward`` gives the caches of HF's ``module`` (a new one of its
    class and config runs), within the float32 rounding of HF's angles."""
    what = f"the rotary module {name} ({type(module).__name__})"
    buffers = list(module.buffers())
    device = buffers[0].device if buffers else torch.device("cpu")
    try:  # a new one: the model's may hold dynamic rope's state, or cast frequencies
        reference = type(module)(module.config).to(device)
    except Exception as exc:
        raise _refuse(family, what, f"cannot be made again from its config to check sinpe's "
                      f"caches against ({exc!r})") from exc
    takes_layer = "layer_type" in inspect.signature(type(module).forward).parameters
    layer_types = sorted(set(getattr(module, "layer_types", None) or [])) if takes_layer else []
    for layer_type in layer_types or [None]:
        count = _unswitched_positions(module, layer_type)
        prefix = "" if layer_type is None else f"{layer_type}_"
        inv_freq = getattr(reference, f"{prefix}inv_freq", None)
        scaling = getattr(reference, f"{prefix}attention_scaling", None)
        if not isinstance(inv_freq, torch.Tensor) or not isinstance(scaling, (int, float)):
            raise _refuse(family, what, f"has no {prefix}inv_freq and {prefix}attention_scaling "
                          "to check sinpe's caches against")
        extra = () if layer_type is None else (layer_type,)
        for positions, largest in _check_positions(module, count, device):
            for dtype in (torch.float32, torch.bfloat16):
                x = torch.zeros((*largest.shape, 8), dtype=dtype, device=device)
                with torch.no_grad():
                    want = reference(x, positions, *extra)
                    try:
                        got = forward(x, positions, *extra)
                    except Exception as exc:
                        raise _refuse(family, what, f"cannot be stood in for by sinpe's rotary "
                                      f"module (it raised {exc!r})") from exc
                why = _caches_differ(got, want, largest, inv_freq, float(scaling))
                if why:
                    raise _refuse(family, what, why)


def _check_positions(module: nn.Module, count: int, device: torch.device
                     ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The position_ids a rotary module is checked on, each with the largest position of
    each cache row: ``(B, L)`` (every module: two rows, one reversed); for a
    vision-language text module (``mrope_section``) also ``(3, B, L)`` with different
    time, height and width positions; for an axial vision module (rope type "axial")
    only ``(N, 2)``, each patch's row and column."""
    steps = torch.arange(count)
    if getattr(module, "rope_type", None) == "axial":
        patches = torch.stack([steps // 7, steps % 7 + steps // 5], dim=1).to(device)
        return [(patches, patches.amax(-1))]
    text = torch.stack([steps, steps.flip(0)]).to(device)
    checks = [(text, text)]
    if getattr(module, "mrope_section", None) is not None:
        rows = torch.stack([text, text // 3 + 1, text.flip(-1) // 2 + 2])
        checks.append((rows, rows.amax(0)))
    return checks


def _caches_differ(got: Any, want: Any, largest: torch.Tensor, inv_freq: torch.Tensor,
                   scaling: float) -> str:
    """Why sinpe's ``(cos, sin)`` do not stand for HF's (at positions whose largest per
    cache row is ``largest``), or ""."""
    if not (isinstance(got, tuple) and len(got) == 2 and isinstance(want, tuple)
            and len(want) == 2):
        return "does not return (cos, sin) as sinpe's does"
    for g, w, part in zip(got, want, ("cos", "sin")):
        if g.shape != w.shape or g.dtype != w.dtype or g.device != w.device:
            return (f"gives {part} of shape {tuple(w.shape)}, {w.dtype}, where sinpe's gives "
                    f"{tuple(g.shape)}, {g.dtype}")
        bound = _tolerance(largest, inv_freq, scaling, w.dtype)
        if not bool(((g.double() - w.double()).abs() <= bound).all()):
            return (f"gives {part} that sinpe's caches do not reproduce (other frequencies, "
                    "sections, layout or scaling)")
    return ""


def check_table(family: str, name: str, old: torch.Tensor, new: torch.Tensor) -> None:
    """ValueError unless sinpe's GPT-J table ``new`` stands for ``old``."""
    what = f"the sin/cos table {name}.embed_positions"
    if old.shape != new.shape or old.dtype != new.dtype or old.device != new.device:
        raise _refuse(family, what, f"is {tuple(old.shape)} {old.dtype}, where sinpe's is "
                      f"{tuple(new.shape)} {new.dtype}")
    rows = torch.arange(old.shape[0], device=old.device)
    bound = _tolerance(rows, torch.ones(1), 1.0, old.dtype)
    if not bool(((new.double() - old.double()).abs() <= bound).all()):
        raise _refuse(family, what, "holds values sinpe's exact table does not reproduce "
                      "(other frequencies or layout)")
