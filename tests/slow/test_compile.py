"""sinpe.torch under torch.compile and torch.export: patched models and the functions.

In tests/slow (a CI stage of its own, ``pytest -n 2 -m slow``; the README's command leaves
this folder out: compile time is what this file spends, a minute and more here).

Tiny random-init transformers models of Llama, Qwen2 and Gemma 3 (text; its
sliding and full layers have rotary modules of their own), each patched with
``sinpe.torch.patch``:

- ``torch.compile(model, fullgraph=True)`` traces a forward as one graph: the
  graph-break count (torch's explain, on the same compilation) is HF's own
  unpatched model's, 0.  The compiled patched model gives the eager patched
  model's logits within inductor's own noise, on the prompt and on decoding
  steps with a static KV cache.
- ``torch.export.export`` with a dynamic sequence length runs, and the exported
  program's logits at another length are the eager patched model's, bit for bit.
  Its graph holds sinpe's custom op on the CPU's kernel path, none on the device path
  (``SINPE_TORCH_PATH=device``: device operations alone).

Inductor's noise: a compiled model computes the same function as the eager one
with other roundings (fused kernels, other orders of the sums), so the gap
between them is float32 rounding noise of the model's size, not a property of
sinpe.  The test measures it on HF's unpatched model (the same weights, the same
input: compiled against eager) and allows the patched model's gap twice that,
plus 4 ulps of the largest logit (logits that a compiler happens to round alike
in HF's model: a maximum over a few thousand roundings varies by about that
between two runs of the same graph).  Llama's forward runs through inductor (its
stride and size checks of the custom ops' outputs included); Qwen2's and Gemma
3's through ``aot_eager``, the same traced and functionalized graph run by
torch's eager kernels (a fraction of inductor's compile time: compile time is
what this file spends).

The functions: ``rope_cache``, ``rope`` (and its gradient), ``rope_``,
``apply_rotary_pos_emb`` and ``RotaryEmbedding`` (longrope's switch inside the
graph; dynamic's graph breaks no more than HF's module) under
``torch.compile(fullgraph=True)`` give the eager bits; the custom ops pass
``torch.library.opcheck``, serve meta tensors, check positions' values when
they run (ValueError; on the device path, which reads none, NaN caches) and an
exported program runs in a new process.
"""
from __future__ import annotations

import copy
import sys
import warnings

import numpy as np
import pytest
from conftest import bits, on_device_path, refused_or_nan, require, require_torch, run_python

torch = require_torch()
transformers = require("transformers")
import sinpe  # noqa: E402
import sinpe.torch as st  # noqa: E402
from torch._dynamo.backends.debugging import ExplainWithBackend  # noqa: E402
from torch.export import Dim  # noqa: E402

pytestmark = pytest.mark.slow  # (a stage of its own: -m slow)

VOCAB, BATCH, PROMPT, STEPS, OTHER = 128, 2, 12, 2, 29
TOKENS = dict(vocab_size=VOCAB, pad_token_id=0, bos_token_id=1, eos_token_id=2)
DECODER = dict(TOKENS, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
               initializer_range=0.2)  # weights that make the positions matter (test_patch)
FAMILIES = {  # name -> (config, compiler backend)
    "llama": (lambda: transformers.LlamaConfig(**DECODER), "inductor"),
    "qwen2": (lambda: transformers.Qwen2Config(**DECODER), "aot_eager"),
    "gemma3": (lambda: transformers.Gemma3TextConfig(
        **DECODER, head_dim=16, sliding_window=8,
        layer_types=["sliding_attention", "full_attention"]), "aot_eager"),
}


def same(a, b) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bits(torch, a), bits(torch, b))


def gap(a, b) -> float:
    return float((a.double() - b.double()).abs().max())


def ulp(tensor) -> float:
    """One ulp of float32 at the tensor's largest magnitude."""
    return float(np.spacing(np.float32(tensor.abs().max().item())))


def decoded(model, config, ids):
    """The prompt's logits, then STEPS greedy decoding steps with a static KV cache
    (fixed shapes: one compiled graph serves every step)."""
    cache = transformers.StaticCache(config=config, max_cache_len=PROMPT + STEPS + 1)
    out = model(input_ids=ids, past_key_values=cache, use_cache=True)
    logits = [out.logits]
    for _ in range(STEPS):
        token = out.logits[:, -1:].argmax(-1)
        out = model(input_ids=token, past_key_values=cache, use_cache=True)
        logits.append(out.logits)
    return logits


def compiled(model, config, ids, backend, fullgraph):
    """The model's decoded logits under torch.compile, and the graph breaks that
    torch's explain counts on that compilation (one explain per shape: the prompt's
    and the decoding steps' graphs are compiled once each)."""
    torch._dynamo.reset()
    counts, logits = [], []
    for phase in ("prompt", "steps"):
        explain = ExplainWithBackend(backend)
        fn = torch.compile(model, fullgraph=fullgraph, backend=explain)
        if phase == "prompt":
            cache = transformers.StaticCache(config=config, max_cache_len=PROMPT + STEPS + 1)
            out = fn(input_ids=ids, past_key_values=cache, use_cache=True)
            logits.append(out.logits)
        else:
            for _ in range(STEPS):
                token = out.logits[:, -1:].argmax(-1)
                out = fn(input_ids=token, past_key_values=cache, use_cache=True)
                logits.append(out.logits)
        counts.append(explain.output().graph_break_count)
    torch._dynamo.reset()
    return logits, counts


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request):
    """HF's model and the same model patched (a copy), eager and compiled, on one of
    torch's threads (tiny models: a second one only waits, on a loaded machine long)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    request.addfinalizer(lambda: torch.set_num_threads(threads))
    name = request.param
    make, backend = FAMILIES[name]
    config = make()
    torch.manual_seed(0)
    hf = transformers.AutoModelForCausalLM.from_config(config).eval()
    patched = copy.deepcopy(hf)
    handle = st.patch(patched)
    ids = torch.randint(3, VOCAB, (BATCH, PROMPT), generator=torch.Generator().manual_seed(7))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers' notes on compiling
        result = dict(
            name=name, backend=backend, config=config, hf=hf, patched=patched,
            hf_eager=decoded(hf, config, ids), patched_eager=decoded(patched, config, ids))
        result["hf_compiled"], result["hf_breaks"] = compiled(hf, config, ids, backend, False)
        result["patched_compiled"], result["patched_breaks"] = compiled(
            patched, config, ids, backend, True)
    yield result
    handle.undo()


def test_compiles_as_one_graph(family):
    """fullgraph=True compiled the patched model (it raises at any graph break), and
    explain counts HF's breaks on the same forward: both 0, prompt and steps."""
    assert family["hf_breaks"] == [0, 0], family["hf_breaks"]
    assert family["patched_breaks"] == family["hf_breaks"]


def test_compiled_within_compilers_noise(family):
    """The compiled patched model's logits are the eager patched model's within twice
    HF's own compiled-versus-eager gap plus 4 ulps (the module docstring)."""
    for step, (hf_e, hf_c, p_e, p_c) in enumerate(zip(
            family["hf_eager"], family["hf_compiled"], family["patched_eager"],
            family["patched_compiled"])):
        noise = gap(hf_c, hf_e)
        allowed = 2 * noise + 4 * ulp(p_e)
        assert gap(p_c, p_e) <= allowed, (family["name"], family["backend"], step,
                                         gap(p_c, p_e), noise, allowed)
        # and the patched model is really sinpe's (its caches are not HF's bits)
        assert p_c.shape == hf_c.shape


def test_export_dynamic_length(family):
    """torch.export with a dynamic sequence length: the program at another length
    gives the eager patched model's logits bit for bit (the graph is the eager
    model's ops, sinpe's caches by the same kernel: its custom op; on the device path
    by the same device operations, no custom op of sinpe's)."""
    model = family["patched"]
    ids = torch.randint(3, VOCAB, (BATCH, PROMPT), generator=torch.Generator().manual_seed(3))
    other = torch.randint(3, VOCAB, (BATCH, OTHER), generator=torch.Generator().manual_seed(4))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.export.export(
            model, (), {"input_ids": ids, "use_cache": False},
            dynamic_shapes={"input_ids": {1: Dim("length", min=2, max=256)}, "use_cache": None})
        ops = [str(node.target) for node in program.graph.nodes
               if getattr(node.target, "namespace", None) == "sinpe"]
        assert ("sinpe.rope_cache.default" in ops) if not on_device_path() else ops == [], ops
        got = program.module()(input_ids=other, use_cache=False).logits
        want = model(input_ids=other, use_cache=False).logits
    assert same(got, want), gap(got, want)


# -- the functions and the rotary module ---------------------------------------------------


def fullgraph(fn, backend="aot_eager"):
    """``fn`` compiled as one graph (torch.compile raises at any graph break)."""
    return torch.compile(fn, fullgraph=True, backend=backend)


def assert_same(got, want):
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.device == w.device and same(g, w), (g.dtype, w.dtype, g.shape, w.shape)


POSITIONS = torch.tensor([[0, 5, 17, 4095, 1 << 20], [3, 2, 1, 0, -7]])
FREQ = torch.tensor([1.0, 0.3, 0.01, 1e-4], dtype=torch.float64)
CACHE_CASES = {
    "offset": lambda p: st.rope_cache(9, 16, 500000.0, offset=40, dtype=torch.bfloat16),
    "positions": lambda p: st.rope_cache(None, 8, positions=p.to(torch.int32), freq=FREQ.float(),
                                         scale=1.5, layout="interleaved"),
    "sections": lambda p: st.rope_cache(None, 8, positions=torch.stack([p, p + 1, 2 * p]),
                                        sections=[2, 1, 1], sections_layout="interleaved",
                                        dtype=torch.float16),
    "float64": lambda p: st.rope_cache(None, 6, 100.0, positions=p, dtype=torch.float64),
}


@pytest.mark.parametrize("case", sorted(CACHE_CASES))
def test_rope_cache_compiles(case):
    fn = CACHE_CASES[case]
    assert_same(fullgraph(fn)(POSITIONS), fn(POSITIONS))


def test_rope_cache_op_forms():
    """The op's forms for the rotary module's outputs: "half" (the r/2 distinct columns)
    and complex ``freqs_cis`` (cos + i sin of those, float32 parts rounded once), the
    eager caches' columns; bad static arguments are refused at trace time."""
    from sinpe.torch import _ops

    cos, sin = st.rope_cache(None, 8, positions=POSITIONS, freq=FREQ)
    half = fullgraph(lambda p: _ops.rope_cache(p, 8, freq=FREQ, layout="half"))(POSITIONS)
    assert_same(half, (cos[..., :4].contiguous(), sin[..., :4].contiguous()))
    cis = fullgraph(lambda p: _ops.rope_cache(p, 8, freq=FREQ, output="complex",
                                              dtype=torch.complex64))(POSITIONS)
    assert cis.dtype == torch.complex64
    assert_same((cis.real.contiguous(), cis.imag.contiguous()), half)
    with pytest.raises(Exception, match="layout must be one of"):
        fullgraph(lambda p: _ops.rope_cache(p, 8, layout="spiral"))(POSITIONS)
    with pytest.raises(ValueError, match="output must be one of"):
        _ops.rope_cache(POSITIONS, 8, output="polar")


def test_rope_compiles_with_gradient():
    """rope (out of place): the eager bits, and the gradient (the inverse rotation by
    the same op) the eager gradient's bits."""
    x = torch.randn(2, 3, 5, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))

    def loss(fn, t, **kwargs):
        t = t.clone().requires_grad_()
        y = fn(t, **kwargs)
        (y * torch.arange(y.numel(), dtype=y.dtype).reshape(y.shape)).sum().backward()
        return y.detach(), t.grad

    for kwargs in ({"offset": 3}, {"positions": POSITIONS[:, None, :], "freq": FREQ,
                                   "layout": "interleaved", "exact": True, "scale": 0.5}):
        assert_same(loss(fullgraph(lambda t, **k: st.rope(t, **k)), x, **kwargs),
                    loss(st.rope, x, **kwargs))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_rope_inplace_compiles(backend):
    """rope_ writes its input inside the graph (a mutating op), the eager bits."""
    x = torch.randn(2, 3, 5, 8, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    want = st.rope_(x.clone(), offset=7, rotary_dim=6)
    got = x.clone()
    returned = fullgraph(lambda t: st.rope_(t, offset=7, rotary_dim=6) * 1, backend)(got)
    assert_same(got, want)
    assert_same(returned, want)


def test_apply_rotary_pos_emb_compiles():
    """HF's expression in the graph (inductor fuses it): the bits of the eager kernel's
    result, full and partial rotary (GPT-NeoX's cat), k=None."""
    g = torch.Generator().manual_seed(3)
    q, k = torch.randn(2, 4, 5, 16, generator=g), torch.randn(2, 2, 5, 16, generator=g)
    cos, sin = st.rope_cache(None, 16, positions=POSITIONS)
    fn = fullgraph(st.apply_rotary_pos_emb)
    assert_same(fn(q, k, cos, sin), st.apply_rotary_pos_emb(q, k, cos, sin))
    narrow = cos[..., :8], sin[..., :8]
    assert_same(fn(q, k, *narrow), st.apply_rotary_pos_emb(q, k, *narrow))
    assert fn(q, None, cos, sin)[1] is None


def rotary_cases():
    phi3 = transformers.Phi3Config(
        **dict(DECODER, max_position_embeddings=64), original_max_position_embeddings=16,
        rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                         "partial_rotary_factor": 0.5, "short_factor": [1.0, 1.1, 1.2, 1.5],
                         "long_factor": [1.0, 2.0, 4.0, 8.0]})
    gemma3 = FAMILIES["gemma3"][0]()
    return {"llama": (transformers.LlamaConfig(**DECODER), None),
            "gemma3-sliding": (gemma3, "sliding_attention"),
            "phi3-longrope": (phi3, None)}


@pytest.mark.parametrize("case", ["llama", "gemma3-sliding", "phi3-longrope"])
def test_rotary_embedding_compiles_and_exports(case):
    """RotaryEmbedding's forward under torch.compile (one graph) and torch.export
    (dynamic length): the eager module's bits, at positions short of longrope's
    switch and past it (its switch is a torch.where in the graph, as HF's)."""
    config, layer_type = rotary_cases()[case]
    module = st.RotaryEmbedding(config)
    extra = () if layer_type is None else (layer_type,)
    x = torch.zeros(1)  # float32 caches: every bit of the values shows
    short = torch.arange(12)[None].expand(BATCH, -1)
    long = short + 30  # past phi3's switch at 16
    fn = fullgraph(lambda ids: module(x, ids, *extra))
    for ids in (short, long):
        assert_same(fn(ids), module(x, ids, *extra))

    class Caches(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rotary = module

        def forward(self, ids):
            return self.rotary(x, ids, *extra)

    other = torch.arange(OTHER)[None].expand(BATCH, -1) + 5
    for strict in (False, True):  # torch.export's default, and through torch.compile's tracer
        program = torch.export.export(Caches(), (short,), strict=strict,
                                      dynamic_shapes=({1: Dim("length", min=2, max=512)},))
        for ids in (other, other + 30):
            assert_same(program.module()(ids), module(x, ids, *extra))


def test_rotary_modules_share_a_graph():
    """Several rotary modules in one graph (a model with two rope configurations, a
    longrope one among them): each its own constants, the eager bits."""
    cases = rotary_cases()
    modules = [st.RotaryEmbedding(cases["llama"][0]), st.RotaryEmbedding(cases["phi3-longrope"][0]),
               st.RotaryEmbedding(cases["gemma3-sliding"][0], layer_type="full_attention")]
    x = torch.zeros(1)

    def caches(ids):
        return tuple(c for module in modules for c in module(x, ids))

    ids = torch.arange(20)[None]
    assert_same(fullgraph(caches)(ids), caches(ids))


def test_rotary_dynamic_breaks_no_more_than_hf():
    """dynamic's frequencies follow the lengths seen (state): HF's module breaks the
    graph on ``max(position_ids) + 1``; sinpe's breaks it no more often, with the
    eager values."""
    config = transformers.LlamaConfig(**dict(DECODER, max_position_embeddings=16),
                                      rope_parameters={"rope_type": "dynamic",
                                                       "rope_theta": 10000.0, "factor": 2.0})
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    x = torch.zeros(1)
    ids = torch.arange(24)[None]
    breaks = {}
    modules = {"hf": LlamaRotaryEmbedding(config), "sinpe": st.RotaryEmbedding(config)}
    for name, module in modules.items():
        torch._dynamo.reset()
        breaks[name] = torch._dynamo.explain(module)(x, ids).graph_break_count
    assert breaks["sinpe"] <= breaks["hf"], breaks
    if not on_device_path():  # (the device path's dynamic forward runs untraced, outside
        assert breaks["sinpe"] > 0, breaks  # the graph: torch.compiler.disable)
    module, eager = st.RotaryEmbedding(config), st.RotaryEmbedding(config)
    torch._dynamo.reset()
    assert_same(torch.compile(module, backend="aot_eager")(x, ids), eager(x, ids))


def test_ops_pass_opcheck():
    """torch's own checks of each op: schema, fake implementation (shapes, strides,
    devices), autograd registration, traced dispatch."""
    x = torch.randn(2, 3, 5, 10, dtype=torch.float64)
    rotation = (POSITIONS[:, None, :], None, None, None, FREQ, "interleaved", 8, 0.5, False,
                None, None)
    cases = [
        (torch.ops.sinpe.rope_cache.default,
         (POSITIONS, 8, None, FREQ, 1.5, "concatenated", torch.bfloat16, None, None)),
        (torch.ops.sinpe.rope_cache.default,
         (torch.stack([POSITIONS, POSITIONS]), 8, 500.0, None, 1.0, "half", torch.float32,
          [3, 1], "contiguous")),
        (torch.ops.sinpe.rope.default, (x.clone().requires_grad_(), *rotation, False)),
        (torch.ops.sinpe.rope_.default, (x.clone(), *rotation)),
    ]
    for op, args in cases:
        torch.library.opcheck(op, args)


def test_ops_on_meta():
    """The fake implementations serve meta tensors: shapes and dtypes, no values."""
    meta = POSITIONS.to("meta")
    cos, sin = torch.ops.sinpe.rope_cache(meta, 8, None, None, 1.0, "half", torch.bfloat16,
                                          None, None)
    assert cos.device.type == "meta" and cos.shape == (2, 5, 4) and sin.dtype == torch.bfloat16
    x = torch.empty(2, 3, 5, 8, device="meta")
    y = torch.ops.sinpe.rope(x, meta[:, None, :], None, None, None, None, "concatenated",
                             None, 1.0, False, None, None, False)
    assert y.device.type == "meta" and y.shape == x.shape
    cos, _ = fullgraph(lambda: st.rope_cache(6, 8, device="meta"))()
    assert cos.device.type == "meta" and cos.shape == (6, 8)


def test_positions_checked_when_the_op_runs():
    """Positions' values are known only when the graph runs: the op checks them then,
    with sinpe's ValueError (nothing is traced on values); on the device path, which reads
    none on the host, the caches of positions out of range are NaN."""
    fn = fullgraph(lambda ids: st.rope_cache(None, 8, positions=ids))
    assert all(cache.isfinite().all() for cache in fn(torch.tensor([1 << 24])))
    refused_or_nan(torch, lambda: fn(torch.tensor([(1 << 24) + 1])), "MAX_POSITION")


def test_exported_program_runs_in_a_new_process(tmp_path):
    """An exported patched model's program, saved, loads and runs in another process
    that imports sinpe.torch (which registers the ops) and not transformers (the
    program returns the logits tensor): the same logits."""
    config = transformers.LlamaConfig(**DECODER)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(3, VOCAB, (1, 10), generator=torch.Generator().manual_seed(5))

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids):
            return self.model(input_ids=input_ids, use_cache=False).logits

    with st.patch(model), torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.export.export(Logits(), (ids,))
        want = model(input_ids=ids, use_cache=False).logits
    torch.export.save(program, tmp_path / "model.pt2")
    torch.save((ids, want), tmp_path / "io.pt")
    script = (
        "import sys, torch, sinpe.torch\n"
        f"torch.set_num_threads({torch.get_num_threads()})  # matmuls add by threads\n"
        "ids, want = torch.load('io.pt')\n"
        "got = torch.export.load('model.pt2').module()(ids)\n"
        "assert 'transformers' not in sys.modules\n"
        "assert torch.equal(got, want), (got - want).abs().max()\n"
        "print('same')\n")
    done = run_python(["-c", script], cwd=tmp_path)
    assert done.returncode == 0 and "same" in done.stdout, done.stderr[-3000:]


# -- patch's apply forms and its double-precision fallback -------------------------------------


def test_every_apply_form_compiles_with_eager_bits():
    """Each of patch's apply forms (the functions it swaps into modeling modules) under
    torch.compile(fullgraph=True): HF's expression in the graph, the eager form's result
    (bits, dtype, shape and strides) on the first float32 probe it takes."""
    from sinpe.torch.patching._forms import FORMS
    from sinpe.torch.patching._probes import probes

    with torch.no_grad():
        for form in FORMS:
            for probe in probes(torch.device("cpu")):
                if probe.args[0].dtype != torch.float32:
                    continue
                try:
                    want = form.function(*probe.args, **probe.kwargs)
                except Exception:  # not a call this form takes
                    continue
                break
            torch._dynamo.reset()
            got = fullgraph(form.function)(*probe.args, **probe.kwargs)
            got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
            for g, w in zip(got, want):
                assert (g is None) == (w is None), form.name
                if w is not None:
                    assert same(g, w) and g.stride() == w.stride(), (form.name, probe.what)
    torch._dynamo.reset()


def rescaled_llama():
    """A tiny Llama whose frequencies were changed after loading: sinpe's rotary module
    cannot stand in for its rotary module, the module's own code in double precision
    does (patch's fallback, a TorchFunctionMode)."""
    config = transformers.LlamaConfig(**dict(DECODER, num_hidden_layers=1))
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    model.model.rotary_emb.inv_freq.mul_(1.5)
    return model


def test_double_precision_fallback_compiles_and_exports():
    """The fallback's mode is traced: torch.compile(fullgraph=True) of the patched rotary
    module (through patch's override) and of the model, and torch.export of the model,
    give the eager patched values bit for bit; the caches are float64 work rounded once
    (not HF's float32 ones at 2**17)."""
    model = rescaled_llama()
    rotary = model.model.rotary_emb
    x, positions = torch.zeros(1), torch.arange(2**17, 2**17 + 40)[None]
    ids = torch.randint(3, VOCAB, (BATCH, PROMPT), generator=torch.Generator().manual_seed(8))
    other = torch.randint(3, VOCAB, (BATCH, OTHER), generator=torch.Generator().manual_seed(9))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = rotary(x, positions)
        with st.patch(model) as handle:
            assert handle.caches == {"model.rotary_emb": "double precision"}
            eager = rotary(x, positions)
            assert gap(eager[0], hf[0]) > 1e-4
            torch._dynamo.reset()
            assert_same(fullgraph(lambda ids: rotary(x, ids))(positions), eager)
            assert_same(fullgraph(lambda ids: model(input_ids=ids, use_cache=False).logits)(ids),
                        model(input_ids=ids, use_cache=False).logits)
            program = torch.export.export(
                model, (), {"input_ids": ids, "use_cache": False},
                dynamic_shapes={"input_ids": {1: Dim("length", min=2, max=256)},
                                "use_cache": None})
            assert_same(program.module()(input_ids=other, use_cache=False).logits,
                        model(input_ids=other, use_cache=False).logits)
    torch._dynamo.reset()


def test_double_precision_first_call_check_is_a_graph_break():
    """A fallback checked at its first call (vision towers, audio encoders) reads values
    then: under torch.compile that call is a graph break (fullgraph=True raises it as
    such), with the eager values; later calls are one graph."""
    from sinpe.torch.patching._double import DoubleForward
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    module = LlamaRotaryEmbedding(transformers.LlamaConfig(**DECODER))
    x, positions = torch.zeros(1), torch.arange(2**17, 2**17 + 40)[None]
    want = DoubleForward(module, checked=True)(x, positions)
    torch._dynamo.reset()
    with pytest.raises(torch._dynamo.exc.Unsupported):
        fullgraph(DoubleForward(module, checked=False))(x, positions)
    double = DoubleForward(module, checked=False)

    def caches(ids):
        return tuple(c * 1 for c in double(x, ids))

    torch._dynamo.reset()
    assert_same(torch.compile(caches, backend="aot_eager")(positions), want)  # the break
    assert double.checked and not double.failed
    assert_same(fullgraph(caches)(positions), want)
    torch._dynamo.reset()
