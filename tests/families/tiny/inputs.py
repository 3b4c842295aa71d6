"""The probe: a forward of a built model that runs, and what it accepted.

Owns the candidate inputs and their order: token ids (with position_ids first, then
without, then ids with a codebook axis), the same text together with an image or audio
input, then non-text inputs alone (pixels, Qwen-VL patch grids, videos, mel features,
waveforms, time series, embeddings).  Every size is read from the config (channels,
image and patch sizes, mel bins, codebooks, hop lengths) or is a plain generic value;
the forward's signature says which inputs are worth trying.  The first input that runs
is the one ``build`` returns in ``info["inputs"]``, so a test can reuse it as is.
"""
from __future__ import annotations

import inspect
import time
from typing import Any

import torch
import transformers

from .keys import TOKEN_RE, is_int
from .shrink import VOCAB

SEQ = 16            # probe length (build's default)
BIG_OFFSET = 2 ** 17  # positions 2**17 + arange(length): does the model take far positions?
# CPU seconds of forward attempts per model: CPU time, not wall time, so that a loaded
# machine gives the same inputs as an idle one
PROBE_BUDGET = 8.0


def all_configs(config: Any, seen: list | None = None) -> list[Any]:
    """config and every config object reachable from it (each once)."""
    seen = seen if seen is not None else []
    if not isinstance(config, transformers.PreTrainedConfig) or any(c is config for c in seen):
        return seen
    seen.append(config)
    for value in vars(config).values():
        if isinstance(value, transformers.PreTrainedConfig):
            all_configs(value, seen)
    return seen


def error_line(e: BaseException) -> str:
    """One line for an exception (with its cause when it is a config validation error)."""
    msg = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:220] if str(e).strip() else ''}"
    if e.__cause__ is not None and "validat" in msg:
        msg += " <- " + error_line(e.__cause__)
    return msg


def _special_ids(config: Any) -> set[int]:
    out = set()
    for c in all_configs(config):
        for key, value in vars(c).items():
            if TOKEN_RE.search(key) or key.endswith("token_id") or "token" in key:
                if is_int(value):
                    out.add(value)
                elif isinstance(value, list):
                    out |= {x for x in value if is_int(x)}
    return out


def _text_vocab(model: Any, config: Any) -> int | None:
    try:
        emb = model.get_input_embeddings()
        if emb is not None and hasattr(emb, "num_embeddings"):
            return int(emb.num_embeddings)
    except Exception:  # noqa: BLE001 - models without (or refusing) get_input_embeddings
        pass
    vocabs = [getattr(c, "vocab_size") for c in all_configs(config)
              if is_int(getattr(c, "vocab_size", None))]
    return min(vocabs) if vocabs else None


def make_ids(model: Any, config: Any, seed: int, length: int) -> torch.Tensor:
    """(1, length) token ids inside the model's vocabulary, avoiding every special id (and
    0-2, the usual pad/bos/eos), so that no model treats a probe token as a marker."""
    vocab = _text_vocab(model, config) or VOCAB
    special = _special_ids(config)
    allowed = [i for i in range(min(vocab, VOCAB)) if i not in special and i >= 3]
    g = torch.Generator().manual_seed(seed)
    pick = torch.randint(0, len(allowed), (1, length), generator=g)
    return torch.tensor(allowed)[pick]


_SIGNATURES: dict[Any, inspect.Signature | None] = {}


def _forward_signature(model: Any) -> inspect.Signature | None:
    """The forward's signature, once per model class (keyed by the function under the bound
    method: every build of a family tries the same classes several times)."""
    forward = model.forward
    key = getattr(forward, "__func__", forward)
    if key not in _SIGNATURES:
        try:
            _SIGNATURES[key] = inspect.signature(forward)
        except (TypeError, ValueError):
            _SIGNATURES[key] = None
    return _SIGNATURES[key]


def _params(model: Any) -> set[str]:
    sig = _forward_signature(model)
    return set(sig.parameters) if sig is not None else set()


def _required(model: Any) -> set[str]:
    sig = _forward_signature(model)
    if sig is None:
        return set()
    return {n for n, p in sig.parameters.items() if p.default is inspect.Parameter.empty
            and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}


def summary(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return f"Tensor{tuple(x.shape)}:{str(x.dtype).replace('torch.', '')}"
    if isinstance(x, (list, tuple)):
        return [summary(v) for v in x][:6]
    return repr(x)[:40]


def first_tensor(out: Any) -> torch.Tensor | None:
    if isinstance(out, torch.Tensor):
        return out
    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        for v in out:
            t = first_tensor(v)
            if t is not None:
                return t
    return None


def _run(model: Any, kwargs: dict) -> Any:
    with torch.no_grad():
        return model(**kwargs)


def _find(config: Any, *names: str) -> Any:
    for c in all_configs(config):
        for n in names:
            v = getattr(c, n, None)
            if v is not None and not isinstance(v, bool):
                return v
    return None


def _ints(config: Any, *names: str) -> list[int]:
    out = []
    for c in all_configs(config):
        for n in names:
            v = getattr(c, n, None)
            if is_int(v) and v > 0 and v not in out:
                out.append(v)
    return out


def _nontext_candidates(model: Any, config: Any, params: set[str], seed: int,
                        length: int) -> list[tuple[str, dict]]:
    """Minimal non-text inputs to try, sized from the config, those covering the forward's
    required arguments first."""
    cands: list[tuple[str, dict]] = []
    chans = (_ints(config, "num_channels", "in_channels", "in_chans") or [3])[0]
    img = _find(config, "image_size", "crop_size", "pretrain_image_size")
    if isinstance(img, (list, tuple)):
        img = img[0]
    if isinstance(img, dict):
        img = img.get("height") or next(iter(img.values()))
    patch = _find(config, "patch_size") or 16
    patch = patch[0] if isinstance(patch, (list, tuple)) else patch
    sizes = list(dict.fromkeys(s for s in [4 * patch if is_int(patch) else None, img, 224]
                               if is_int(s)))
    grid_key = next((k for k in ("grid_thw", "image_grid_thw") if k in params), None)
    if grid_key:  # Qwen-VL style towers: flattened patches + (t, h, w) grid
        merge = (_ints(config, "spatial_merge_size", "merge_size") or [1])[0]
        tps = (_ints(config, "temporal_patch_size") or [1])[0]
        ps = patch if is_int(patch) else 14
        h = w = 2 * merge
        feat = chans * tps * ps * ps
        grid = torch.tensor([[1, h, w]])
        for key in ("hidden_states", "pixel_values"):
            if key in params:
                cands.append((f"{key}({h * w},{feat})+{grid_key}[[1,{h},{w}]]",
                              {key: torch.randn(h * w, feat), grid_key: grid}))
    if "pixel_values" in params:
        for s in sizes:
            cands.append((f"pixel_values(1,{chans},{s},{s})",
                          {"pixel_values": torch.randn(1, chans, s, s)}))
        for s in sizes[:2]:  # image pairs (keypoint matching), one image of a list
            for n in (2, 1):
                kw = {"pixel_values": torch.randn(1, n, chans, s, s)}
                if "image_attention_mask" in params:
                    kw["image_attention_mask"] = torch.ones(1, length, n, dtype=torch.long)
                cands.append((f"pixel_values(1,{n},{chans},{s},{s})", kw))
    for key in ("pixel_values_videos", "pixel_values_video"):
        if key in params:
            frames = (_ints(config, "frames_per_clip", "num_frames") or [2])[0]
            tub = (_ints(config, "tubelet_size") or [1])[0]
            frames = max(min(frames, 4), tub)
            for s in sizes:
                cands.append((f"{key}(1,{frames},{chans},{s},{s})",
                              {key: torch.randn(1, frames, chans, s, s)}))
    if "input_features" in params:
        for mels in _ints(config, "num_mel_bins", "feature_size", "input_feat_size", "n_mels",
                          "input_dim", "feature_projection_input_dim") or [80]:
            for t in (64, 3000):
                cands.append((f"input_features(1,{mels},{t})",
                              {"input_features": torch.randn(1, mels, t)}))
                cands.append((f"input_features(1,{t},{mels})",
                              {"input_features": torch.randn(1, t, mels)}))
    if "input_values" in params:
        ch = (_ints(config, "audio_channels") or [1])[0]
        for n in (16000, 24000, 4000):
            cands.append((f"input_values(1,{ch},{n})", {"input_values": torch.randn(1, ch, n)}))
            cands.append((f"input_values(1,{n})", {"input_values": torch.randn(1, n)}))
    if "past_values" in params:
        ctx = (_ints(config, "context_length") or [512])[0]
        plen = (_ints(config, "patch_length") or [32])[0]
        n = min(ctx, 4 * plen)
        cands.append((f"past_values(1,{n})", {"past_values": torch.randn(1, n)}))
        cands.append(("past_values [list of (n,)]", {"past_values": [torch.randn(n)]}))
    if "audio_values" in params:
        cands.append(("audio_values(1,1,16000)", {"audio_values": torch.randn(1, 1, 16000)}))
    required = _required(model)
    embeds = sorted(p for p in params if p.endswith(("_embeds", "hidden_states"))
                    if p in required or p == "inputs_embeds")
    if embeds and not cands:  # models fed with embeddings (diffusion heads, drafters)
        width = (_ints(config, "hidden_size", "d_model", "n_embd", "embed_dim") or [64])[0]
        kw = {p: torch.randn(1, length, width) for p in embeds}
        desc = "+".join(f"{p}(1,{length},{width})" for p in embeds)
        if "position_ids" in params:
            cands.append((desc + "+position_ids",
                          dict(kw, position_ids=torch.arange(length)[None])))
        cands.append((desc, kw))
    if {"input_values", "input_features"} <= required:  # codecs that take both: frames * hop
        hops = _ints(config, "hop_length", "downsample_factor", "frame_size") or [320]
        mels = _ints(config, "num_mel_bins", "feature_size", "input_feat_size", "n_mels",
                     "feature_projection_input_dim") or [80]
        pairs = []
        for hop in hops[:2]:
            for m in mels[:3]:
                for shape in ((1, length, m), (1, m, length)):
                    pairs.append((f"input_values(1,1,{length * hop})+input_features{shape}",
                                  {"input_values": torch.randn(1, 1, length * hop),
                                   "input_features": torch.randn(*shape)}))
        cands = pairs + cands
    if "decoder_input_ids" in params:  # encoder-decoder with a non-text encoder
        ids = make_ids(model, config, seed, length)
        cands = cands + [(d + f"+decoder_input_ids(1,{length})", dict(kw, decoder_input_ids=ids))
                         for d, kw in cands]
    cands.sort(key=lambda c: -len(required & set(c[1])))
    return cands


def _text_tries(model: Any, config: Any, params: set[str], seed: int,
                length: int) -> list[tuple[str, dict]]:
    ids = make_ids(model, config, seed, length)
    base = {"input_ids": ids}
    if "use_cache" in params:
        base["use_cache"] = False
    if "decoder_input_ids" in params:  # encoder-decoder: the decoder gets the same ids
        base["decoder_input_ids"] = ids.clone()
    pos = torch.arange(length)[None]
    tries = []
    if "position_ids" in params:
        kw = dict(base, position_ids=pos)
        if "decoder_position_ids" in params and "decoder_input_ids" in base:
            kw["decoder_position_ids"] = pos
        tries.append(("text+position_ids", kw))
    tries.append(("text", dict(base)))
    # ids with a codebook / channel axis (audio-token language models); an image model's
    # num_channels counts colours, not codebooks
    image_like = _find(config, "image_size", "patch_size") is not None
    ks = _ints(config, "num_codebooks", "n_codebooks", "audio_num_codebooks", "num_quantizers",
               "num_code_groups", "codebook_num", *(() if image_like else ("num_channels",)))
    for k in sorted({k_ + extra for k_ in ks for extra in (0, 1)}):
        if k > 64 or k < 2:
            continue
        for key in [k_ for k_ in ("decoder_input_ids", "input_ids") if k_ in base]:
            for shape in ((1, length, k), (1, k, length)):
                kw = dict(base)
                kw[key] = ids.flatten()[torch.arange(shape[1] * shape[2]) % length].reshape(shape)
                for name, extra in ((f"text+position_ids [{key}{shape}]", {"position_ids": pos}),
                                    (f"text [{key}{shape}]", {})):
                    if extra and "position_ids" not in params:
                        continue
                    tries.append((name, dict(kw, **extra)))
    return tries


def _kind(desc: str) -> str:
    if desc.startswith("text"):
        return "text+position_ids" if desc.startswith("text+position_ids") else "text"
    if "pixel" in desc or "grid_thw" in desc:
        return "vision"
    if "input_features" in desc or "input_values" in desc or "audio" in desc:
        return "audio"
    return "embeds" if "embeds" in desc else "other"


def probe(model: Any, config: Any, seed: int, length: int) -> dict:
    """Find a forward that runs; record the input kind and whether position_ids is accepted."""
    params = _params(model)
    info: dict[str, Any] = {"forward_params": sorted(params)[:60]}
    errors: list[str] = []
    tries: list[tuple[str, dict]] = []
    if "input_ids" in params:
        tries += _text_tries(model, config, params, seed, length)
    nontext = _nontext_candidates(model, config, params, seed, length)
    if "input_ids" in params:  # text together with an image / audio (models that need both)
        text = tries[0][1]
        tries += [(f"{tries[0][0]}+{desc}", dict(text, **kw)) for desc, kw in nontext[:12]]
    tries += nontext
    t0 = time.process_time()
    for desc, kw in tries:
        if time.process_time() - t0 > PROBE_BUDGET:
            errors.append(f"probe time budget ({PROBE_BUDGET}s) spent")
            break
        try:
            out = _run(model, kw)
        except Exception as e:  # noqa: BLE001 - a refused input is the next try's cue
            errors.append(f"{desc}: {error_line(e)}")
            continue
        info.update(kind=_kind(desc), input_desc=desc, inputs=kw,
                    position_ids="position_ids" in kw, output=summary(first_tensor(out)),
                    errors=errors)
        if "position_ids" in kw:
            big = {k: (v + BIG_OFFSET if k.endswith("position_ids") else v) for k, v in kw.items()}
            try:
                t = first_tensor(_run(model, big))
                info["big_positions"] = "ok" + ("" if t is None or torch.isfinite(t).all()
                                               else " (non-finite output)")
            except Exception as e:  # noqa: BLE001 - recorded, not fatal
                info["big_positions"] = error_line(e)
        elif "input_ids" in kw:
            info["position_ids_error"] = next(
                (e for e in errors if e.startswith("text+position_ids")),
                "no position_ids argument")
        return info
    info.update(kind="none", errors=errors or ["no input found: no known input argument in "
                                               f"forward({', '.join(sorted(params)[:12])})"])
    return info
