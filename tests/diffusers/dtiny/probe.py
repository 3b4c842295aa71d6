"""The probe: a forward of a tiny model that runs, found by trying layouts and repairs.

Owns ``probe`` and ``PROBE_RULES``.  For each layout of the main input (:mod:`.inputs`),
in order, the inputs are synthesised and the forward runs under ``torch.no_grad``; the
first that returns is kept, so a test can reuse ``info["inputs"]`` as they are.  A
failure whose message says what is wrong is repaired and the layout runs again
(``REPAIRS`` in words); each repair reads only the error and the inputs, never the
model's name.  The attempts stop at ``PROBE_BUDGET`` CPU seconds.  When nothing runs,
the error reported is the last one of the layout that took the most repairs (the first
such layout): the one that got furthest.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import keyword
import re
import signal
import threading
import time
import traceback
from typing import Any, Iterator

import torch

from .caller import caller_value
from .defaults import _statements
from .docshapes import doc_shapes
from .inputs import (BATCH, MASK_RE, MISSING, TIME_RE, Sizes, doc_shape, forward_parameters,
                     layouts, sizes, stacked_inputs, synthesise, value_for)

_IDS_MAIN = re.compile(r"(^|_)(input_ids|token_ids?)$")
PROBE_BUDGET = 8.0  # CPU seconds of forward attempts per model
ATTEMPT_LIMIT = 5.0  # wall seconds one forward may take (an alarm stops it, main thread only)
MAX_REPAIRS = 8     # repairs per layout

PROBE_RULES = [
    "layouts in order (the one the main input's docstring shape names first, then "
    "inputs.LAYOUTS, video ones first for a video config), two samples, then one if an error "
    "names the batch; the first forward that returns is kept",
    "a matrix product error (a x b and c x d): the input of a rows and last width b gets "
    "width c (the main input only in a token layout, where its last axis is a width; among "
    "several, one the failing statements read, else not the main input, whose own embedding "
    "ran first); a convolution's channels likewise",
    "a convolution error (expected C channels, got M): the input with M channels gets C",
    "an error about None (NoneType, 'X is required', 'cannot be None', 'not iterable'): the "
    "optional parameters left out that the failing statements (innermost diffusers frame "
    "first) or the message name are given (inputs.INPUT_RULES; else the main input's shape)",
    "'missing required positional arguments: a, b' while a dict input is given: the dict gets "
    "entries a, b by the same rules",
    "'expected condition to be a boolean tensor': masks become bool",
    "'... divisible by N' (N <= 16): a latent grid of N x N tokens",
    "'Length of `x` N should be equal to M': x gets M entries (ones); an embedding's "
    "'indices' must be Long: the float input the failing statements name becomes ids (zeros)",
    "among several inputs an error could mean (same width or channels), the one the failing "
    "statements (innermost first) name",
    "'not enough values to unpack (expected k, got j)' where the failing statement unpacks "
    "an input's shape: that input gets rank k (a timestep (B,) becomes one per frame (B, F); "
    "another input gets axes of one before its last)",
    "'size of tensor a (X) must match ... b (Y)' with Y > X: in a video layout with X frames, "
    "Y frames (a temporal table made for a fixed number of frames), else Y - X more text "
    "tokens, once (a position table made for a fixed text length)",
    "an error about None while a dict input is given: the names the innermost failing "
    "statement reads that an input rule knows (resolution, aspect_ratio, ...) become entries",
    "a width no input has: the one an input's channels make k times (Fourier features, "
    "channels patched in: that input gets want // k), or the main input concatenated with "
    "inputs of its shape (they split the width); else each (B, k) input in turn gets k + 1 "
    "entries, and the change of the width measured gives the count that fits; a LayerNorm's "
    "'normalized_shape=[W] ... got input of size [...]': that input gets width W",
    "'NoneType' object is not callable at self.module(an optional input given): that input "
    "is left out; an unbound local variable: the optional inputs the `if` that assigns it "
    "reads are given; none-repairs read what a statement reads (not what it assigns), and "
    "the inputs its variables were assigned from",
    "'too many indices for tensor of dimension k' / 'not enough values to unpack' of a "
    "timestep: every timestep input gets one entry per frame; of another input: rank k + 1",
    "'Sizes of tensors must match ... Expected size E but got size k*E' at a concatenation: "
    "the input with k tokens feeding the list item named is pooled (B, D); a view of a "
    "pooled input's size(1) that is invalid: it gets a token axis (B, 1, D)",
    "sizes a frame count apart in a video layout: text inputs once per frame (B*F rows); "
    "'X has resolution ... expected (H, W)': the input so named gets that side",
    "then, for the shape errors left (unpack, dimension, size, index, invalid), the inputs "
    "whose value differs from their documented shape take it (docstrings can be stale: after "
    "the precise repairs); then the text-length and frame-count tables; last, lists of items "
    "instead of lists of samples",
]

_NONE_RE = re.compile(r"NoneType|None\b|is required|cannot be None|not iterable|"
                      r"must be Tensor, not")


def error_line(e: BaseException) -> str:
    """The error's type and first line, and its last line when the message spans several (a
    module's repr between them)."""
    lines = str(e).strip().splitlines()
    text = lines[0][:300] if lines else ""
    if len(lines) > 1 and len(lines[0]) < 40:
        text += " ... " + lines[-1].strip()[:240]
    return f"{type(e).__name__}: {text}"


def where(e: BaseException) -> str:
    """'file.py:line' of the innermost diffusers frame of an exception's traceback."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if "diffusers" in f.filename
              and "/tests/" not in f.filename]
    return f"{frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno}" if frames else ""


def _rows(value: torch.Tensor) -> int:
    n = 1
    for d in value.shape[:-1]:
        n *= d
    return n


TOKEN_LAYOUTS = ("tokens", "video_tokens", "sequence_t", "vector", "video_cl")


def _read_part(statement: str) -> str:
    """A statement without the targets of its assignment."""
    m = re.match(r"\s*[\w\s,.\[\]]+?=(?!=)", statement)
    return statement[m.end():] if m else statement


def feeding(statement: str, source: str, inputs: dict, depth: int = 3) -> list[str]:
    """The inputs a statement reads, directly or through the variables its function assigns
    from them (``image_emb = self.context_embedding(image_embeddings)``), nearest first."""
    out: list[str] = []
    names = list(dict.fromkeys(re.findall(r"(?<![.\w])([A-Za-z_]\w*)", _read_part(statement))))
    seen = set(names)
    for _ in range(depth):
        nxt = []
        for name in names:
            if name in inputs:
                out.append(name)
                continue
            for m in re.finditer(rf"^\s*{re.escape(name)}\s*=(?!=)\s*(.+)$", source, re.MULTILINE):
                for w in re.findall(r"(?<![.\w])([A-Za-z_]\w*)", m.group(1)):
                    if w not in seen:
                        seen.add(w)
                        nxt.append(w)
        names = nxt
    return list(dict.fromkeys(out))


def _as_input(name: str, statements: list[str], inputs: dict) -> str:
    """The input a name of an inner function's statement stands for: itself, or what the
    calls outside pass for it (``f(clip_txt_pooled=clip_text_pooled)``)."""
    for statement in statements[1:]:
        if name in inputs:
            return name
        m = re.search(rf"(?<![.\w]){re.escape(name)}\s*=\s*(\w+)\s*[,)]", statement)
        if m:
            name = m.group(1)
    return name


def _named_first(candidates: list[str], statements: list[str]) -> list[str]:
    """The candidates in the order the failing statements (innermost first) name them, those
    no statement names last."""
    def rank(name: str) -> int:  # what a statement reads (not what it assigns)
        return next((i for i, st in enumerate(statements)
                     if re.search(rf"(?<![.\w]){re.escape(name)}\b", _read_part(st))),
                    len(statements))
    return sorted(candidates, key=rank)


def _width_repair(error: str, inputs: dict, main: str, layout: str,
                  statements: list[str]) -> tuple[str, int] | None:
    """(input name, width) an error asks for, or None; among several inputs that could be
    meant, the one the failing statements name first."""
    m = re.search(r"mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)",
                  error)
    if m:
        rows, have, want = int(m.group(1)), int(m.group(2)), int(m.group(3))
        candidates = []
        for name, value in inputs.items():
            if name == main and layout not in TOKEN_LAYOUTS:
                continue
            if isinstance(value, list) and value and isinstance(value[0], torch.Tensor):
                value = value[0]  # a list's items go through the layer one by one
            if isinstance(value, torch.Tensor) and value.is_floating_point() and \
                    value.dim() >= 2 and value.shape[-1] == have:
                candidates.append((_rows(value) != rows, name))
        best = [n for r, n in candidates if not r] or [n for _, n in candidates]
        # the main input went through its own embedding first: another input is likelier
        best = sorted(best, key=lambda n: n == main)
        return (_named_first(best, statements)[0], want) if best else \
            _expanded(inputs, main, layout, have, want, statements)
    m = re.search(r"normalized_shape=\[(\d+)\], expected input with shape \[\*, \d+\], but got "
                  r"input of size\s*\[([\d, ]+)\]", error)
    if m:  # a LayerNorm over an input's last axis
        want, got = int(m.group(1)), tuple(int(v) for v in m.group(2).split(","))
        found = [n for n, v in inputs.items() if isinstance(v, torch.Tensor) and
                 tuple(v.shape) == got and n != main]
        return (_named_first(found, statements)[0], want) if found else None
    m = re.search(r"expected input\[.*\] to have (\d+) channels, but got (\d+) channels", error)
    if m:
        want, have = int(m.group(1)), int(m.group(2))
        axis = {"video_fc": 2, "tokens": -1, "video_tokens": -1, "sequence_t": -1,
                "video_cl": -1}.get(layout, 1)
        found = [name for name, value in inputs.items()
                 if isinstance(value, torch.Tensor) and value.dim() >= 3 and
                 value.shape[axis if name == main else 1] == have]
        found = sorted(found, key=lambda n: n == main)  # the main input's layer ran first
        return (_named_first(found, statements)[0], want) if found else \
            _expanded(inputs, main, layout, have, want, statements)
    return None


_AXES = {"video_fc": 2, "tokens": -1, "video_tokens": -1, "sequence_t": -1, "video_cl": -1,
         "vector": -1}  # the channel axis of the main input per layout (else 1)


def _main_width(inputs: dict, main: str, layout: str) -> int | None:
    value = inputs.get(main)
    if not isinstance(value, torch.Tensor) or value.dim() < 2:
        return None
    return value.shape[_AXES.get(layout, 1)]


def _expanded(inputs: dict, main: str, layout: str, have: int, want: int,
              statements: list[str] = ()) -> tuple | None:
    """No input has the width a layer got: the forward made it of an input's channels k
    times (Fourier features, channels patched in: that input, the failing statements' first,
    else the main input's kind, gets want // k), or concatenated the main input with inputs
    of its shape (the main input gets what they leave of want, each of them an equal part
    when they take it all)."""
    axis = _AXES.get(layout, 1)
    x = inputs.get(main)
    rank = x.dim() if isinstance(x, torch.Tensor) else len(x[0].shape) + 1 if \
        isinstance(x, list) and x and isinstance(x[0], torch.Tensor) else 0
    found = {}
    for name, value in inputs.items():
        item = value[0] if isinstance(value, list) and value and \
            isinstance(value[0], torch.Tensor) else value
        unbatched = item is not value
        if not isinstance(item, torch.Tensor) or not item.is_floating_point() or \
                item.dim() + unbatched != rank or rank < 2:
            continue
        c = item.shape[(axis - unbatched) if axis > 0 else axis]
        if c and have % c == 0 and have > c and want % (have // c) == 0:
            found[name] = want // (have // c)
    if found:
        name = _named_first(sorted(found, key=lambda n: n == main), statements)[0]
        return name, found[name]
    c = _main_width(inputs, main, layout)
    if not c or not isinstance(x, torch.Tensor):
        return None
    axis = axis % x.dim()
    others = {n: v.shape[axis] for n, v in inputs.items() if n != main and
              isinstance(v, torch.Tensor) and v.dim() == x.dim() and v.is_floating_point() and
              all(a == b for i, (a, b) in enumerate(zip(v.shape, x.shape)) if i != axis)}
    if others and sum(others.values()) + c == have:
        rest = want - sum(others.values())
        if rest > 0:
            return main, rest
        part = want // (len(others) + 1)
        if part > 0:
            return main, want - part * len(others), {n: part for n in others}
    return None


def _doc_repair(inputs: dict, s: Sizes, kwargs: dict, main: str) -> bool:
    """The inputs whose value differs from the shape the forward's docstring gives them take
    that shape (inputs.doc_value), all at once."""
    found = []
    for name, value in inputs.items():
        if name == main or name in s.doc_inputs or not isinstance(value, torch.Tensor):
            continue
        shape = doc_shape(name, kwargs, s, value)
        if shape is not None and tuple(value.shape) != shape:
            found.append(name)
    s.doc_inputs.update(found)
    return bool(found)


def _width_search(inputs: dict, main: str, s: Sizes, have: int, want: int) -> bool:
    """A layer got a width no input has (an input's entries each embedded, then joined):
    each (B, k) input in turn gets k + 1 entries; the change of the width the layer got gives
    the width of one entry, and the number of entries that makes the layer's is kept."""
    for name, value in inputs.items():
        if name == main or not isinstance(value, torch.Tensor) or value.dim() != 2 or \
                not value.is_floating_point():
            continue
        k = value.shape[1]
        if name not in s.searched:
            s.searched[name] = (k, have)
            s.widths[name] = k + 1
            return True
        k0, h0 = s.searched[name]
        if k == k0 + 1 and s.widths.get(name) == k:  # measured: one more entry adds have - h0
            delta = have - h0
            s.widths[name] = k0  # back, unless the measure finds the count
            if delta > 0 and (have - want) % delta == 0 and 0 < k - (have - want) // delta:
                s.widths[name] = k - (have - want) // delta
            return True
    return False


def _guards(variable: str, source: str) -> list[str]:
    """The names the ``if`` statements read that guard the assignments of ``variable`` in a
    function's source."""
    lines = source.splitlines()
    out: list[str] = []
    for i, line in enumerate(lines):
        if not re.match(rf"\s*{re.escape(variable)}\s*=(?!=)", line):
            continue
        indent = len(line) - len(line.lstrip())
        for j in range(i - 1, -1, -1):
            prev = lines[j]
            if prev.strip() and len(prev) - len(prev.lstrip()) < indent:
                if re.match(r"\s*(el)?if\b", prev):
                    out += re.findall(r"(?<![.\w])([A-Za-z_]\w*)", prev)
                break
    return out


def _none_repair(e: BaseException, error: str, params: dict, inputs: dict) -> set[str]:
    """The optional parameters left out that the failure names."""
    if not _NONE_RE.search(error):
        return set()
    absent = {n for n, p in params.items() if n not in inputs}
    named = {w for w in re.findall(r"\w+", error) if w in absent}
    if named:
        return named
    for statement, _ in _statements(e):  # what it reads, not what it assigns
        found = set(re.findall(r"\w+", _read_part(statement))) & absent
        if found:
            return found
    for statement, source in _statements(e)[:2]:  # through the variables assigned from them
        found = set(feeding(statement, source, dict.fromkeys(absent)))
        if found:
            return found
    return set()


def _dict_entries(e: BaseException, error: str, inputs: dict, s: Sizes, kwargs: dict) -> bool:
    """An error about None while a dict input is given: the names the innermost failing
    statement reads that an input rule knows become entries of that dict."""
    dicts = [n for n, v in inputs.items() if isinstance(v, dict)]
    if not dicts or not _NONE_RE.search(error):
        return False
    statements = _statements(e)
    if not statements:
        return False
    g = torch.Generator()
    x = next(iter(inputs.values()))
    known = []
    # names the statement reads, not attributes (self.additional_condition_proj)
    for word in dict.fromkeys(re.findall(r"(?<![.\w])([A-Za-z_]\w*)", statements[0][0])):
        if word in s.dict_keys.get(dicts[0], ()) or word in inputs or keyword.iskeyword(word):
            continue
        param = inspect.Parameter(word, inspect.Parameter.KEYWORD_ONLY)  # no default: needed
        if value_for(word, param, kwargs, s, x, g) is not MISSING:
            known.append(word)
    if not known:
        return False
    s.dict_keys[dicts[0]] = s.dict_keys.get(dicts[0], ()) + tuple(known)
    return True


def repair(e: BaseException, error: str, s: Sizes, inputs: dict, params: dict,
           layout: str, kwargs: dict) -> bool:
    """Apply the repair the error asks for to ``s``; False when there is none (or it was
    made already)."""
    main = next(iter(inputs))
    statements = [st for st, _ in _statements(e)]
    m = re.search(r"mat1 and mat2 shapes cannot be multiplied \(\d+x(\d+) and (\d+)x\d+\)", error)
    if m and any(s.widths.get(n) == k + 1 for n, (k, _) in s.searched.items()) and \
            _width_search(inputs, main, s, int(m.group(1)), int(m.group(2))):
        return True  # a measure under way goes first
    fix = _width_repair(error, inputs, main, layout, statements)
    if fix is not None and (s.widths.get(fix[0]) != fix[1] or len(fix) > 2):
        s.widths[fix[0]] = fix[1]
        if len(fix) > 2:
            if all(s.widths.get(n) == w for n, w in fix[2].items()):
                return False
            s.widths.update(fix[2])
        return True
    m = re.search(r"mat1 and mat2 shapes cannot be multiplied \(\d+x(\d+) and (\d+)x\d+\)", error)
    if m and fix is None and _width_search(inputs, main, s, int(m.group(1)), int(m.group(2))):
        return True
    if "'NoneType' object is not callable" in error and statements:
        # self.absent_module(an optional input we gave): leave that input out
        called = re.findall(r"self\.\w+\(\s*(\w+)", statements[0])
        drop = [n for n in called if n in inputs and n not in s.dropped and
                params.get(n) is not None and params[n].default is not inspect.Parameter.empty]
        if drop:
            s.dropped.update(drop)
            s.forced -= set(drop)
            return True
    m = re.search(r"too many indices for tensor of dimension (\d+)", error)
    if m:
        k = int(m.group(1))
        for statement in statements[:2]:
            for name in re.findall(r"(?<![.\w])(\w+)\[", statement):
                if name in inputs and name != main and isinstance(inputs[name], torch.Tensor) \
                        and inputs[name].dim() == k and s.ranks.get(name) != k + 1:
                    # per-frame timesteps: every timestep input alike
                    group = [n for n in inputs if TIME_RE.match(n)] if TIME_RE.match(name) \
                        else [name]
                    s.ranks.update({n: k + 1 for n in group})
                    return True
    names = _none_repair(e, error, params, inputs) - s.forced
    if names:
        s.forced |= names
        return True
    unbound = re.search(r"cannot access local variable '(\w+)'", error)
    if unbound and statements:
        guards = _guards(unbound.group(1), _statements(e)[0][1])
        names = {n for n in guards if n in params and n not in inputs} - s.forced
        if names:  # the optional inputs the `if` that assigns it reads
            s.forced |= names
            s.dropped -= names
            return True
    if _dict_entries(e, error, inputs, s, kwargs):
        return True
    m = re.search(r"missing \d+ required positional arguments?: (.*)", error)
    dicts = [n for n, v in inputs.items() if isinstance(v, dict)]
    if m and dicts:
        keys = tuple(re.findall(r"'(\w+)'", m.group(1)))
        if keys and s.dict_keys.get(dicts[0]) != keys:
            s.dict_keys[dicts[0]] = tuple(dict.fromkeys(s.dict_keys.get(dicts[0], ()) + keys))
            return True
    m = re.search(r"divisible by (\d+)", error)
    if m and s.grid % int(m.group(1)) and int(m.group(1)) <= 16:
        s.grid = int(m.group(1))  # a token grid the attention tiles (NABLA's 8x8 blocks)
        return True
    m = re.search(r"[Ll]ength of `(\w+)` (\d+) should be equal to (\d+)", error)
    if m and m.group(1) in inputs and s.lengths.get(m.group(1)) != int(m.group(3)):
        s.lengths[m.group(1)] = int(m.group(3))  # one entry per layer it scales
        return True
    if re.search(r"'indices' to have one of the following scalar types: Long", error):
        named = _named_first([n for n, v in inputs.items() if isinstance(v, torch.Tensor)
                              and v.is_floating_point() and n != main and n not in s.ints],
                             statements)
        if named:
            s.ints.add(named[0])  # an embedding's indices: class-like ids
            return True
    m = re.search(r"not enough values to unpack \(expected (\d+), got (\d+)\)", error)
    if m:
        for statement, _ in _statements(e)[:1]:
            target = re.search(r"=\s*(\w+)\.shape\b", statement)
            name = target.group(1) if target else None
            if name in inputs and name != main and isinstance(inputs[name], torch.Tensor) and \
                    s.ranks.get(name) != int(m.group(1)):
                # per-frame timesteps: every timestep input of the rank alike
                group = [n for n in inputs if TIME_RE.match(n) and
                         isinstance(inputs[n], torch.Tensor) and
                         inputs[n].dim() == inputs[name].dim()] if TIME_RE.match(name) else [name]
                s.ranks.update({n: int(m.group(1)) for n in group})
                return True
    if "expected condition to be a boolean tensor" in error and not s.bool_masks and \
            any(MASK_RE.search(n) for n in inputs):
        s.bool_masks = True
        return True
    r = re.search(r"^\w+: (.+?) has resolution \(\d+, \d+\) but is expected to have resolution "
                  r"\((\d+), (\d+)\)", error)
    if r:  # "Face pixel values has resolution ...": the input so named gets that side
        name = re.sub(r"\W+", "_", r.group(1).strip().lower())
        side = (int(r.group(3)), int(r.group(2)))
        if name in inputs and s.sides.get(name) != side and max(side) <= 64:
            s.sides[name] = side
            return True
    m = re.search(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\)", error)
    if m and s.video_layout and not s.text_per_frame and s.latent_frames > 1 and (
            int(m.group(1)) == s.latent_frames * int(m.group(2)) or
            int(m.group(2)) == s.latent_frames * int(m.group(1))):
        s.text_per_frame = True  # sizes a frame count apart: text given once per frame
        return True
    if re.search(r"unpack|dimension|\bdim\b|size|shape|indices|index|must match|invalid|"
                 r"[Ee]xpected", error) and _doc_repair(inputs, s, kwargs, main):
        return True  # after the repairs an error names precisely: docstrings can be stale
    if m and int(m.group(2)) > int(m.group(1)):
        have, want = int(m.group(1)), int(m.group(2))
        if s.video_layout and have == s.latent_frames and s.frames_override is None:
            s.frames_override = want  # a temporal table made for a fixed number of frames
            return True
        if not s.extra_tokens:
            s.extra_tokens = want - have  # a table made for a fixed text length
            return True
    m = re.search(r"Sizes of tensors must match except in dimension \d+\. Expected size (\d+) but "
                  r"got size (\d+)", error)
    if m and int(m.group(2)) % int(m.group(1)) == 0 and int(m.group(2)) > int(m.group(1)):
        k = int(m.group(2)) // int(m.group(1))  # one row per token where one per sample was
        st = _statements(e)  # meant: an input with k tokens is pooled (its token axis dropped)
        what = st[0][0] if st else ""
        n = re.search(r"for tensor number (\d+)", error)
        items = re.search(r"\[([^\[\]]*)\]", what)
        if n and items and int(n.group(1)) < len(items.group(1).split(",")):
            what = items.group(1).split(",")[int(n.group(1))]  # the list item that differs
        for name in (feeding(what, st[0][1], inputs) if st else []):
            value = inputs[name]
            if name != main and isinstance(value, torch.Tensor) and value.dim() == 3 and \
                    value.shape[1] == k and s.ranks.get(name) != 2:
                s.ranks[name] = 2
                return True
    if re.search(r"shape '\[[-\d, ]+\]' is invalid for input of size", error):
        for name in re.findall(r"(?<![.\w])(\w+)\.(?:size\(1\)|shape\[1\])",
                               " ".join(statements[:1])):
            name = _as_input(name, statements, inputs)
            value = inputs.get(name)  # a pooled (B, D) input read as (B, tokens, D)
            if name != main and isinstance(value, torch.Tensor) and value.dim() == 2 and \
                    s.ranks.get(name) != 3:
                s.ranks[name] = 3
                return True
    if not s.batched_lists and any(isinstance(v, list) and v and isinstance(v[0], torch.Tensor)
                                   for n, v in inputs.items() if n != main):
        s.batched_lists = True  # lists of items (one batched tensor each), not of samples
        return True
    return False


class AttemptTooLong(Exception):
    pass


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Interrupt the forward after ``seconds`` (SIGALRM: the handler runs between torch's
    operations, so a forward of many small ones stops; only in the main thread)."""
    if threading.current_thread() is not threading.main_thread() or \
            not hasattr(signal, "setitimer"):
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        raise AttemptTooLong(f"the forward took more than {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def summary(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return f"Tensor{tuple(x.shape)}:{str(x.dtype).replace('torch.', '')}"
    if isinstance(x, (list, tuple)):
        return [summary(v) for v in x][:6]
    if isinstance(x, dict):
        return {k: summary(v) for k, v in list(x.items())[:6]}
    return repr(x)[:60]


def tensors(x: Any) -> list[torch.Tensor]:
    """The tensors of an output (tuples, lists, dicts, dataclass outputs)."""
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, dict) or hasattr(x, "to_tuple"):
        x = list(x.values()) if isinstance(x, dict) else list(x.to_tuple())
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in tensors(v)]
    return []


def probe(model: torch.nn.Module, kwargs: dict, seed: int) -> dict[str, Any]:
    """info: ``inputs`` (the kwargs of the forward that ran, or of the attempt that got
    furthest), ``remake`` (input name -> a no-argument callable that computes again an input
    the pipeline computes outside the forward, such as a rotary table: call it where the
    forward is to see the same code, a patch included), ``layout``, ``batch``, ``output`` (a
    summary), ``forward_ok``, ``error`` (the
    last of the layout that took the most repairs, when none returned), ``errors`` (every
    attempt's),
    ``forward_seconds``; ``_output`` is the output itself."""
    start = time.process_time()
    params = dict(forward_parameters(model))
    errors: list[str] = []
    furthest = (-1, "", {}, None)  # (repairs in the layout, its last error, inputs, exception)
    for batch in (BATCH, 1):
        docs = doc_shapes(model)
        stacks = stacked_inputs(model, kwargs)
        main_doc = docs.get(next(iter(params), ""))
        for layout in layouts(sizes(kwargs), main_doc, next(iter(params), "")):
            s: Sizes = sizes(kwargs)
            s.layout, s.batch, s.docs = layout, batch, docs
            s.stacks, s.main_doc = stacks, main_doc or ()
            s.main_ids = bool(_IDS_MAIN.search(next(iter(params), "")))
            repairs = 0
            for _ in range(MAX_REPAIRS + 1):
                if time.process_time() - start > PROBE_BUDGET:
                    return _failed(errors, furthest, "the probe's time budget was spent")
                inputs, missing = synthesise(model, kwargs, s, seed)
                if missing:
                    errors.append(f"{layout}/B={batch}: {missing}")
                    furthest = max(furthest, (repairs, missing, inputs, None), key=lambda f: f[0])
                    break
                t0 = time.perf_counter()
                try:
                    with torch.no_grad(), _time_limit(ATTEMPT_LIMIT):
                        out = model(**inputs)
                except Exception as e:  # noqa: BLE001 - recorded; a repair or layout may run
                    error = f"{error_line(e)} [{where(e)}]"
                    errors.append(f"{layout}/B={batch}: {error}")
                    furthest = max(furthest, (repairs, error, inputs, e), key=lambda f: f[0])
                    if not repair(e, error, s, inputs, params, layout, kwargs):
                        break
                    repairs += 1
                    continue
                return {"inputs": inputs, "layout": layout, "batch": batch,
                        "output": summary(out), "forward_ok": True, "error": "",
                        "errors": errors, "forward_seconds": round(time.perf_counter() - t0, 3),
                        "remake": {n: functools.partial(caller_value, model, n, s)
                                   for n in sorted(s.caller_made)},
                        "_output": out}
        if not any(re.search(r"batch|size of tensor a \(\d+\) must match|expand", e)
                   for e in errors):
            break
    return _failed(errors, furthest, "")


def _failed(errors: list[str], furthest: tuple, why: str) -> dict[str, Any]:
    error = furthest[1] or why or "no attempt"
    return {"inputs": furthest[2], "layout": None, "batch": None, "output": None,
            "forward_ok": False, "error": error + (f" ({why})" if why and furthest[1] else ""),
            "errors": errors, "forward_seconds": None, "remake": {}, "_output": None,
            "_exception": furthest[3]}
