"""What ``sinpe drift PATH`` needs beyond :func:`sinpe.torch.drift`: the model from a
path (offline), and the measurements as a table.  ``sinpe.cli`` parses the command
line and imports this module only when the command runs (it needs torch and
transformers, which ``import sinpe`` never does).
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def load(path: str, dtype: str, seed: int) -> tuple[nn.Module, bool]:
    """The model at ``path`` and whether its weights are random.

    A directory is read by ``AutoModelForCausalLM.from_pretrained`` with
    ``local_files_only=True`` (nothing is downloaded); a ``.json`` file is a
    config, whose model is built with random weights drawn from ``seed``.
    ``ValueError`` for a path that is neither, or a model transformers cannot build.
    """
    import transformers

    if dtype not in DTYPES:
        raise ValueError(f"--dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    if os.path.isdir(path):
        try:
            model = transformers.AutoModelForCausalLM.from_pretrained(
                path, dtype=DTYPES[dtype], local_files_only=True)
        except (OSError, ValueError, KeyError) as exc:
            raise ValueError(f"{path}: not a transformers model directory this "
                             f"installation can load offline: {exc}") from exc
        return model, False
    if not os.path.isfile(path) or not path.endswith(".json"):
        raise ValueError(f"{path}: PATH must be a model directory or a config.json")
    try:
        config = transformers.AutoConfig.from_pretrained(path, local_files_only=True)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            # built in the dtype, as from_pretrained loads: the rotary modules keep
            # float32 frequencies (model.to(dtype) would round them too)
            build: Any = transformers.AutoModelForCausalLM.from_config
            model = build(config, dtype=DTYPES[dtype])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: cannot build a causal language model from this "
                         f"config: {exc}") from exc
    return model, True


def _cell(value: float) -> str:
    return "0" if value == 0 else f"{value:.1e}"


def table(result: dict[str, list[Any]], title: str, notes: list[str]) -> str:
    """The measurements as the command prints them."""
    header = (f"{'offset s':>10}  {'max |logit change|':>19}  {'mean KL (nats)':>19}  "
              f"{'top-1 kept':>15}  {'max |cache error|':>19}")
    sub = f"{'':>10}  " + "  ".join(f"{'hf':>9}{'sinpe':>10}" if i != 2 else
                                     f"{'hf':>7}{'sinpe':>8}" for i in range(4))
    lines = [title, "the same tokens at positions 0.. and s..: exact RoPE changes nothing; "
             "hf = the model as loaded, sinpe = patched by sinpe.torch.patch", "",
             header, sub]
    for i, s in enumerate(result["positions"]):
        cells = []
        for key in ("logits", "kl", "top1", "cache"):
            hf, ours = result[f"{key}_hf"][i], result[f"{key}_sinpe"][i]
            if key == "top1":
                cells.append(f"{100 * hf:>6.1f}%{100 * ours:>7.1f}%")
            else:
                cells.append(f"{_cell(hf):>9}{_cell(ours):>10}")
        lines.append(f"{s:>10}  " + "  ".join(cells))
    return "\n".join(lines + [""] + notes)
