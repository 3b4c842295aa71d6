"""``build``: a tiny, seeded, float32 eval-mode instance of a diffusers model class, with
inputs for a forward that runs.

Owns ``build`` and the session hygiene around it: diffusers' warnings and logs off, one
torch thread (threads cost a tiny model more than they give), a private random state
(``torch.random.fork_rng``), all restored afterwards, so a test session keeps its own.
It also owns the check of what shrinking did to the positional code that is *derived*
from widths rather than named by a config key (``derived_changes``: a timestep sinusoid
as wide as the model, a rope over a width the heads make).
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import re
import time
import warnings
from typing import Any, Iterator

import torch

import diffusers

from .configs import tiny_config
from .defaults import _statements, default_kwargs, fill_value, instantiate, instantiate_default
from .discover import model_classes, positional_kinds, positional_modules, settings
from .keys import AXES_RE, HEAD_DIM_RE, LAYERS_RE, WIDTH_KEYS, is_int, is_int_list, positional
from .probe import probe, tensors


@contextlib.contextmanager
def quiet_and_serial() -> Iterator[None]:
    """diffusers' warnings and logs off, one torch thread and a private RNG state, all
    restored afterwards."""
    logging = diffusers.utils.logging
    verbosity = logging.get_verbosity()
    threads = torch.get_num_threads()
    with warnings.catch_warnings(), torch.random.fork_rng(devices=[]):
        warnings.simplefilter("ignore")
        logging.set_verbosity_error()
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(threads)
            logging.set_verbosity(verbosity)


@functools.lru_cache(maxsize=None)
def _default_settings(cls: type) -> dict[str, dict[str, Any]] | None:
    """The settings of the positional modules of the class's default config (on meta)."""
    try:
        model, _, _ = instantiate_default(cls, device="meta")
    except Exception:  # noqa: BLE001 - no default instance to compare with
        return None
    return {path: settings(m) for path, m in positional_modules(model, computing=True).items()}


def derived_changes(cls: type, model: torch.nn.Module) -> list[str] | None:
    """'path.attribute: default -> tiny' for each setting of a positional module that differs
    from the same module of the default config's instance (None: no default instance)."""
    default = _default_settings(cls)
    if default is None:
        return None
    out = []
    for path, module in positional_modules(model, computing=True).items():
        if path not in default:
            continue
        mine = settings(module)
        for key, value in default[path].items():
            if key in mine and mine[key] != value:
                out.append(f"{path or '<model>'}.{key}: {value!r} -> {mine[key]!r}")
    return out


def build(name: str, seed: int = 0, compare: bool = True) -> tuple[torch.nn.Module, dict]:
    """(model, info): the class ``name``'s tiny config (:mod:`.configs`), instantiated with
    ``torch.manual_seed(seed)`` in float32 and eval mode, and a forward probed
    (:mod:`.probe`).  RuntimeError when no tiny config builds.

    info keys: ``class``, ``kinds`` and ``sites`` (:func:`.discover.positional_kinds`),
    ``config`` (the tiny kwargs), ``changes`` ({key: (default, tiny)}), ``repairs`` (values
    a repair filled), ``changed`` (positional keys changed, with why: empty when the
    positional configuration is the default's), ``derived`` (settings of positional modules
    that differ from the default model's, e.g. a timestep sinusoid as wide as the model;
    None without ``compare`` or a default instance), ``params``, ``inputs`` (the kwargs of the
    forward that ran: reuse them), ``remake`` (name -> a callable computing again an input
    the pipeline computes outside the forward, a rotary table: call it under a patch to get
    the patched table), ``layout``, ``batch``, ``output`` (a summary),
    ``finite`` (every output tensor finite), ``forward_ok``, ``error`` and ``errors``,
    ``forward_seconds``, ``seconds`` (the whole build).
    """
    with quiet_and_serial():
        return _build(name, seed, compare)


def forward_config_repair(kwargs: dict, cls: type, error: BaseException | None) -> dict | None:
    """The config change the failing forward asks for, None when there is none:

    - a matrix product wanting width W where a model width key (hidden_size, ...) holds the
      width the layer got: the key becomes W (a default whose widths disagree);
    - a convolution given C + k channels where a config counts k extra input channels as 0
      (``extra_in_channels``: a time embedding the forward concatenates): that key is k;
    - an IndexError in a statement about the rope's axes while the axes widths leave part of
      the head width: one more axis in front, as wide as that part;
    - a missing module or value (``self.x`` is None: 'NoneType' object is not callable /
      iterable): the config flag named like it (``*_x``, or ``has_/use_`` + a prefix of x)
      that is False becomes True, or a None key named x gets its FILL_RULES value.
    """
    if error is None:
        return None
    m = re.search(r"mat1 and mat2 shapes cannot be multiplied \(\d+x(\d+) and (\d+)x\d+\)",
                  f"{error}")
    if m:  # a model width the config sets apart from the width its layers were made for
        have, want = int(m.group(1)), int(m.group(2))
        key = next((k for k in WIDTH_KEYS if kwargs.get(k) == have), None)
        return {**kwargs, key: want} if key else None
    m = re.search(r"expected input\[.*\] to have (\d+) channels, but got (\d+) channels",
                  f"{error}")
    extra = next((k for k, v in kwargs.items() if re.search(r"extra\w*channels$", k) and v == 0),
                 None)
    if m and extra and int(m.group(2)) > int(m.group(1)):
        # the forward adds channels (a time embedding concatenated) the config does not count
        return {**kwargs, extra: int(m.group(2)) - int(m.group(1))}
    statements = _statements(error)
    axes = next((k for k, v in kwargs.items() if AXES_RE.match(k) and is_int_list(v)), None)
    if isinstance(error, IndexError) and axes and statements and "axes" in statements[0][0]:
        # the code makes more position axes than the rope's axes widths: one more axis in
        # front, as wide as the head width they leave
        head = next((v for k, v in kwargs.items() if HEAD_DIM_RE.search(k) and is_int(v)), 0)
        rest = head - sum(kwargs[axes])
        return {**kwargs, axes: type(kwargs[axes])([rest, *kwargs[axes]])} if rest > 0 else None
    if not re.search(r"NoneType", f"{error}"):
        return None
    for statement, _ in statements[:1]:
        for word in re.findall(r"self\.(?:config\.)?(\w+)", statement):
            for key, value in kwargs.items():
                flag = re.sub(r"^(has|use|with|add|enable)_", "", key)
                if value is False and key != word and (key.endswith(word) or (
                        flag != key and len(flag) >= 4 and word.startswith(flag))):
                    return {**kwargs, key: True}
                if value is None and key == word:
                    filled = fill_value(cls, kwargs, key)
                    if filled is not None:
                        return {**kwargs, key: filled}
    return None


def share_modules(cls: type, model: torch.nn.Module, kwargs: dict,
                  seed: int) -> tuple[torch.nn.Module, str] | None:
    """A model whose forward needs modules of a transformer (``from_transformer``): the class
    its source copies most from (``# Copied from diffusers....Class.method``), built tiny with
    the config values the two share, lends them: (the model, the partner's name); None when
    there is none."""
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return None
    copied = re.findall(r"# Copied from diffusers\.[\w.]*?\.([A-Z]\w+)\.\w+", source)
    names = [n for n in dict.fromkeys(sorted(copied, key=copied.count, reverse=True))
             if n in model_classes() and n != cls.__name__]
    if not names:
        return None
    partner = model_classes()[names[0]]
    try:
        pkw, _ = tiny_config(partner)
        pkw = {**pkw, **{k: v for k, v in kwargs.items() if k in pkw}}
        torch.manual_seed(seed + 1)
        other = instantiate(partner, pkw, "cpu").float().eval()
        shared = cls.from_transformer(model, other)
    except Exception:  # noqa: BLE001 - the partner does not fit
        return None
    return shared, partner.__name__


def two_layers(kwargs: dict, cls: type) -> dict | None:
    """The last forward repair: the layer counts the shrink rules cut to one, two (a block
    whose first and last layers differ in width needs both); None when none was cut."""
    default = default_kwargs(cls)
    cut = {k: min(2, default[k]) for k, v in kwargs.items()
           if LAYERS_RE.search(k) and is_int(v) and v == 1 and is_int(default.get(k))
           and default[k] > 1}
    return {**kwargs, **cut} if cut else None


def _build(name: str, seed: int, compare: bool) -> tuple[torch.nn.Module, dict]:
    """Build, probe, and when the forward fails: modules shared from a partner transformer
    (share_modules), a config change the error asks for (forward_config_repair), last two
    layers per stack (two_layers); each noted in info["repairs"] (and info["changed"] when
    a positional key changed)."""
    start = time.perf_counter()
    cls = model_classes()[name]
    kwargs, info = tiny_config(cls)
    tried_layers = False
    for _ in range(4):  # a forward that reads a module or value the config left out
        torch.manual_seed(seed)
        model = instantiate(cls, kwargs, "cpu").float().eval()
        found = probe(model, kwargs, seed)
        if not found["forward_ok"] and "from_transformer" in found["error"]:
            shared = share_modules(cls, model, kwargs, seed)
            if shared is not None:
                model, partner = shared
                found = probe(model, kwargs, seed)
                info["repairs"].append(f"forward: modules shared from a tiny {partner} "
                                       "(from_transformer)")
        fixed = None if found["forward_ok"] else \
            forward_config_repair(kwargs, cls, found.get("_exception"))
        if fixed is None and not found["forward_ok"] and not tried_layers:
            fixed, tried_layers = two_layers(kwargs, cls), True
        if fixed is None:
            break
        info["repairs"].append("forward: " + ", ".join(
            f"{k}: {kwargs.get(k)!r} -> {v!r}" for k, v in fixed.items() if kwargs.get(k) != v))
        info["changed"] += [f"{k}: {kwargs.get(k)!r} -> {v!r} (a forward repair: the tiny "
                            f"config's forward fails without it)" for k, v in fixed.items()
                            if kwargs.get(k) != v and positional(k)]
        kwargs = fixed
    found.pop("_exception", None)
    output = found.pop("_output")
    kinds = positional_kinds(name)
    info.update(found, **{"class": name, "kinds": kinds["kinds"], "sites": kinds["sites"],
                          "config": kwargs})
    info["finite"] = bool(output is not None and all(
        torch.isfinite(t).all() for t in tensors(output) if t.is_floating_point()))
    info["derived"] = derived_changes(cls, model) if compare else None
    info["seconds"] = round(time.perf_counter() - start, 2)
    return model, info
