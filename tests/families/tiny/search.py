"""The search: which class, config and shrink variant of a family builds and runs.

Owns ``build`` and ``VARIANTS``.  One attempt is: the default config of the class (a
composite's text config for a CausalLM class), its fill-ins and the repairs earlier
attempts called for (repair.py), the shrink rules (shrink.py), a float32 eval model
seeded with ``seed``, a probe for a forward that runs (inputs.py), and a check that the
rope-relevant values are those of the default config (check.py).  Attempts go from
the most shrunk variant to the least, class by class; an error that names a repair is
retried once with it, and errors that repeat cut the search short, since a milder
variant cannot help with them.  Attempts whose config equals one that already failed
are not run again: their outcome is known.
"""
from __future__ import annotations

import contextlib
import copy
import json
import time
import warnings
from typing import Any, Iterator

import torch
import transformers

from .check import rope_diff
from .families import candidate_classes
from .inputs import SEQ, error_line, probe
from .repair import apply_repairs, fill, repair_for
from .shrink import HEADS, Shrinker

VARIANTS = (  # tried in order for each class until one builds and runs
    {"shrink_ffn": True, "heads": HEADS},
    {"shrink_ffn": True, "heads": 4},
    {"shrink_ffn": False, "heads": 4},
    {"shrink_ffn": False, "heads": None},
)


def shrink_config(config_cls: Any, shrink_ffn: bool = True, heads: int | None = HEADS,
                  repairs: tuple = (), base: Any = None) -> tuple[dict, dict]:
    """The dict of a shrunk ``config_cls`` (built from its default, ``base`` when given:
    a default instance, read only) and notes; ``config_cls.from_dict`` makes the config."""
    base = config_cls() if base is None else base
    d = copy.deepcopy(base.to_dict())  # nothing of a shared base may be edited in place
    notes = fill(d) + apply_repairs(d, base, repairs)
    s = Shrinker(shrink_ffn=shrink_ffn, heads=heads)
    s.shrink(d, base, config_cls.__name__)
    s.follow(d)
    s.tokens(d)
    return d, {"fill": notes, "notes": s.notes, "width_map": s.width_map,
               "token_map": s.token_map}


def _configs_to_try(cls: Any) -> list[tuple[str, Any]]:
    """(how, config class) for a model class; a CausalLM class of a composite config gets
    the composite's text config first."""
    ccls = cls.config_class
    out = []
    if cls.__name__.endswith("ForCausalLM") and getattr(ccls, "sub_configs", None) and \
            "text_config" in ccls.sub_configs:
        out.append(("text_config", ccls))
    out.append(("config", ccls))
    return out


class _Search:
    """The state of one build: attempts so far, the default config of each config class
    (built once: a strict dataclass validates every field), configs that failed."""

    def __init__(self, seed: int, length: int):
        self.seed = seed
        self.length = length
        self.attempts: list[str] = []
        self.defaults: dict[Any, Any] = {}
        self.failed: dict[tuple, str] = {}  # (class, how, config dict as JSON) -> its error
        self.fallback: tuple | None = None  # the first model that built (no forward ran)
        self.reserve: tuple | None = None   # the first that ran with a rope value changed

    def default(self, ccls: Any) -> Any:
        if ccls not in self.defaults:
            self.defaults[ccls] = ccls()
        return self.defaults[ccls]

    def attempt(self, cls: Any, how: str, ccls: Any, variant: dict, repairs: tuple):
        """One attempt: (model, config, info, error); model None when it did not build or
        when the same config already failed (then its error is returned again: building and
        probing are deterministic, so running it again would only repeat that error)."""
        try:
            d, notes = shrink_config(ccls, variant["shrink_ffn"], variant["heads"], repairs,
                                     base=self.default(ccls))
            key = (cls, how, json.dumps(d, sort_keys=True, default=repr))
            if key in self.failed:
                return None, None, None, self.failed[key]
            config = ccls.from_dict(d)
            if how == "text_config":
                config = config.get_text_config()
        except Exception as e:  # noqa: BLE001 - a config the rules (or repairs) broke
            return None, None, None, f"config: {error_line(e)}"
        torch.manual_seed(self.seed)
        try:
            model = cls(config).float().eval()
        except Exception as e:  # noqa: BLE001 - recorded; the error may call for a repair
            self.failed[key] = f"build: {error_line(e)}"
            return None, config, None, self.failed[key]
        info = probe(model, config, self.seed, self.length)
        try:
            default = self.default(ccls)
            default = default.get_text_config() if how == "text_config" else default
            info["rope_check"] = rope_diff(default, config)
        except Exception as e:  # noqa: BLE001 - recorded as a difference
            info["rope_check"] = [f"check failed: {error_line(e)}"]
        info.update(model_class=cls.__name__, config_class=type(config).__name__,
                    variant=dict(variant), config_from=how, shrink=notes, repairs=list(repairs),
                    params=sum(p.numel() for p in model.parameters()))
        if info["kind"] != "none":
            return model, config, info, None
        self.failed[key] = f"forward: {' || '.join(info['errors'][:3])}"
        return model, config, info, self.failed[key]

    def variant(self, cls: Any, how: str, ccls: Any, variant: dict) -> tuple:
        """The attempts of one variant, repaired as their errors ask: (the model, config and
        info that ran with the family's rope, else None; the last error, None when it ran;
        whether no other variant of this class can help)."""
        repairs: tuple = ()
        while True:
            label = (f"{cls.__name__}[{how}, ffn={variant['shrink_ffn']}, "
                     f"heads={variant['heads']}{', ' + str(list(repairs)) if repairs else ''}]")
            model, config, info, error = self.attempt(cls, how, ccls, variant, repairs)
            if error is None and info.get("rope_check") and not repairs and \
                    variant is not VARIANTS[-1]:
                # runs, but a rope-relevant value (e.g. a rotary width derived from a hidden
                # size) changed: kept in reserve while a milder variant is tried
                self.attempts.append(f"{label}: runs, rope values changed: "
                                     f"{info['rope_check'][:2]}")
                if self.reserve is None:
                    self.reserve = (model, config, info)
                return None, None, False
            if error is None:
                return (model, config, info), None, False
            self.attempts.append(f"{label}: {error}")
            if "ImportError" in error and "requires the" in error:
                return None, error, True  # a missing library: no variant will help
            if model is not None and self.fallback is None:
                self.fallback = (model, config, info)
            fix = repair_for(error)
            if fix is None or fix in repairs or len(repairs) >= 4:
                # a None the repair did not cure is in the default config: shrinking won't help
                return None, error, fix in repairs and fix[0] == "fill_none"
            repairs = repairs + (fix,)

    def finish(self, found: tuple, start: float, forward_ok: bool) -> tuple:
        model, config, info = found
        info["forward_ok"] = forward_ok
        info["attempts"] = self.attempts
        info["seconds"] = round(time.time() - start, 2)
        return model, config, info


@contextlib.contextmanager
def _quiet_and_serial() -> Iterator[None]:
    """transformers' warnings and logs off, one torch thread and a private RNG state, all
    restored afterwards: the rest of a test session keeps its own settings."""
    verbosity = transformers.utils.logging.get_verbosity()
    threads = torch.get_num_threads()
    with warnings.catch_warnings(), torch.random.fork_rng(devices=[]):
        warnings.simplefilter("ignore")
        transformers.utils.logging.set_verbosity_error()
        torch.set_num_threads(1)  # tiny models: threads cost more than they give
        try:
            yield
        finally:
            torch.set_num_threads(threads)
            transformers.utils.logging.set_verbosity(verbosity)


def build(family: str, seed: int = 0, length: int = SEQ, classes: list | None = None,
          time_budget: float = 40.0) -> tuple[Any, Any, dict]:
    """(model, config, info): a tiny float32 eval-mode random-init model of the family.

    For each candidate class (see candidate_classes) and each shrink variant (VARIANTS), the
    shrunk default config is built and probed with ``length`` tokens; a failure whose message
    names a missing config attribute or a None value triggers one generic repair (see
    FILL_RULES) and a retry.  The first (class, config) that builds and runs a forward is
    returned.  If none runs, the first that built is returned with info["forward_ok"] False;
    if none builds, RuntimeError lists every attempt's error.  ``classes`` replaces the
    candidate classes; ``time_budget`` (CPU seconds) ends the search early.

    info keys: model_class, config_class, config_from ('config' or 'text_config'), variant,
    params, kind ('text+position_ids' | 'text' | 'vision' | 'audio' | 'embeds' | 'other' |
    'none'), input_desc, inputs (the kwargs of the forward that ran: reuse them), position_ids
    (accepted?), position_ids_error, big_positions (result with positions 2**17 + arange),
    output, errors (probe attempts that failed), forward_ok, rope_check (rope-relevant values
    that differ from the default config), shrink (fill-ins, notes, width map, token map),
    repairs, attempts, forward_params, seconds (wall time of the build).
    """
    with _quiet_and_serial():
        return _build(family, seed, length, classes, time_budget)


def _build(family: str, seed: int, length: int, classes: list | None,
           time_budget: float) -> tuple[Any, Any, dict]:
    start, cpu = time.time(), time.process_time()
    search = _Search(seed, length)
    for cls in (classes or candidate_classes(family)):
        for how, ccls in _configs_to_try(cls):
            last_error = last_forward = None
            hopeless = jump = False
            for variant in VARIANTS:
                if time.process_time() - cpu > time_budget:  # CPU time: as for PROBE_BUDGET
                    break
                if hopeless or jump and variant is not VARIANTS[-1]:
                    continue
                if search.reserve is not None and variant is VARIANTS[-1]:
                    continue  # not worth a full-width model: the reserve (rope_check noted) wins
                found, error, stop = search.variant(cls, how, ccls, variant)
                if found is not None:
                    return search.finish(found, start, True)
                hopeless |= stop
                if error is not None and error.startswith("forward:"):
                    first = error.split(" || ")[0]
                    if first == last_forward:
                        break  # the shrink variant makes no difference to the inputs
                    last_forward = first
                if error is not None and error == last_error:
                    jump = True  # same error again: only the unshrunk-heads variant is left to try
                last_error = error
            if search.reserve is not None:
                break  # this class runs (with a noted rope difference): no other class
        if search.reserve is not None:
            break
    if search.reserve is not None:
        return search.finish(search.reserve, start, True)
    if search.fallback is not None:
        return search.finish(search.fallback, start, False)
    raise RuntimeError(" | ".join(search.attempts) if search.attempts else "no model class")
