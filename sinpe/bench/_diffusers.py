"""``python -m sinpe.bench --diffusers``: diffusers' positional modules in a denoising loop,
their own and patched by sinpe.

A denoising step calls a model's positional modules again with the same grid and a new
timestep.  Timed here, per step, each module as diffusers has it and patched by
``sinpe.torch.patch`` (another instance, patched once for the whole run), side by side
(blocks taken in turn):

- a Flux-like model at 1024x1024: ``FluxPosEmbed`` of the ids of 512 text and 4096
  image tokens (three axes of 16, 56 and 56 features, theta 10000; the transformer
  concatenates the text and image ids anew at each step), and its ``Timesteps`` of a
  new timestep;
- a Wan-like model at 480p, 81 frames: ``WanRotaryPosEmbed`` (heads of 128, patches of
  1x2x2) of a latent of 21x60x104, and its ``Timesteps`` of a new timestep.

The memory sinpe keeps for a module is reported beside the bytes of one step's output:
the table of the grid, once.
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Dict, List

from sinpe.bench._timing import _us, print_rows

FLUX_AXES, FLUX_TEXT, FLUX_GRID = [16, 56, 56], 512, 64
WAN_LATENT = (1, 16, 21, 60, 104)


def _flux(torch: Any) -> tuple[Any, Callable[[int], tuple[Any, ...]]]:
    from diffusers.models.transformers.transformer_flux import FluxPosEmbed

    text = torch.zeros(FLUX_TEXT, 3)
    rows, cols = torch.meshgrid(torch.arange(FLUX_GRID), torch.arange(FLUX_GRID), indexing="ij")
    image = torch.stack([torch.zeros_like(rows), rows, cols], -1).reshape(-1, 3).float()
    return FluxPosEmbed(theta=10000, axes_dim=FLUX_AXES), lambda step: (
        torch.cat((text, image), dim=0),)


def _wan(torch: Any) -> tuple[Any, Callable[[int], tuple[Any, ...]]]:
    from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed

    latent = torch.zeros(WAN_LATENT)
    return WanRotaryPosEmbed(128, (1, 2, 2), 1024), lambda step: (latent,)


def _timesteps(torch: Any) -> tuple[Any, Callable[[int], tuple[Any, ...]]]:
    from diffusers.models.embeddings import Timesteps

    return Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=0), lambda step: (
        torch.tensor([1000.0 - 37.5 * (step % 26)]),)


def _nbytes(value: Any) -> int:
    import torch

    return sum(t.numel() * t.element_size() for t in torch.utils._pytree.tree_leaves(value)
               if isinstance(t, torch.Tensor))


def diffusers_cases(quick: bool, blocks: Callable[..., Dict[str, float]]) -> List[Dict[str, Any]]:
    """Rows {"case", "times": {"diffusers", "sinpe"}, "kept", "table"}; none without
    diffusers."""
    try:
        import diffusers  # noqa: F401
        import torch
    except ImportError:
        return []
    import sinpe.torch as st

    rounds, seconds = (5, 1.0) if quick else (11, 4.0)
    results: List[Dict[str, Any]] = []
    cases = (("Flux 1024x1024: FluxPosEmbed of 4608 ids", _flux),
             ("Flux, Wan: Timesteps(256) of a new timestep", _timesteps),
             ("Wan 480p x 81 frames: WanRotaryPosEmbed of 21x60x104", _wan))
    with torch.no_grad():
        for label, make in cases:
            own, inputs = make(torch)
            ours = copy.deepcopy(own)
            handle = st.patch(ours)
            steps = {"diffusers": 0, "sinpe": 0}

            def step_of(module: Any, name: str) -> Callable[[], None]:
                def step() -> None:
                    steps[name] += 1
                    module(*inputs(steps[name]))
                return step

            try:
                times = blocks({"diffusers": step_of(own, "diffusers"),
                                "sinpe": step_of(ours, "sinpe")}, rounds, seconds)
                call = vars(ours)["forward"].call
                kept = sum(_nbytes(v) for v in call._kept.values())
                table = _nbytes(own(*inputs(0)))
            finally:
                handle.undo()
            results.append({"case": label, "times": times, "kept": kept, "table": table,
                            "columns": call.columns is not None})
    return results


def print_diffusers(results: List[Dict[str, Any]], file: Any) -> None:
    if not results:
        return
    print("\ndiffusers' positional modules, a denoising step each (the same grid, a new "
          "timestep), their own and patched by sinpe.torch.patch; medians of blocks taken "
          "in turn; kept = what sinpe keeps for the module, table = one step's output",
          file=file)
    rows = [["case", "diffusers", "patched", "patched/diffusers", "kept", "table"]]
    for r in results:
        t = r["times"]
        rows.append([r["case"], _us(t["diffusers"]), _us(t["sinpe"]),
                     f"{t['sinpe'] / t['diffusers']:.2f}x", f"{r['kept'] / 2**20:.2f} MiB",
                     f"{r['table'] / 2**20:.2f} MiB"])
    print_rows(rows, file)
