"""The diffusers evidence page's tables are what examples/diffusers/evidence.py computes.

docs/diffusers-evidence.md includes docs/_generated/diffusers_{positions,latents,steps}.md,
written with their JSON (diffusers_evidence.json) by one command
(``python examples/diffusers/evidence.py --write docs/_generated``, a few minutes).
Here: each Markdown table is the script's rendering of the committed JSON; the JSON
holds every model, variant, path and step, and what the page says of every run (the
patched positional values within half a float32 ulp, sinpe's own values used, with no
warning, on both branches, the two patched branches the same bits wherever there is a
branch, the patched latents after the last step about as far from the exact run as
diffusers', within a factor of 1.5); and the first denoising step of the Flux-like
model in float32 is computed again (about ten seconds), on both of diffusers' branches,
patched and not, and against the exact float64 reference:

- each positional module's distance from its exact values: diffusers' within 25% of the
  committed cell (float32 roundings of the same angles and frequencies, whose float32
  ``exp`` and ``pow`` may round otherwise on another CPU), sinpe's within half a float32
  ulp (plus 2**-30) on both branches;
- whether the two patched runs give the same bits, as the JSON says;
- the latents' distances from the reference and between diffusers' branches: differences
  of nearly equal float32 numbers, whose last bits depend on the CPU's matrix kernels:
  within a factor of 3 of the committed cells.
"""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from conftest import require, require_torch

torch = require_torch()
require("diffusers")

REPO = Path(__file__).resolve().parents[1]
GENERATED = REPO / "docs" / "_generated"
HALF_ULP = 2.0**-25 + 2.0**-30  # of a float32 value in [0.5, 1), and the double's own


def _script():
    """examples/diffusers/evidence.py as a module (under a name no package on sys.path has)."""
    spec = importlib.util.spec_from_file_location(
        "diffusers_evidence_example", REPO / "examples" / "diffusers" / "evidence.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclass looks its module up)
    spec.loader.exec_module(module)
    return module


evidence = _script()
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def committed() -> dict:
    return json.loads((GENERATED / f"{evidence.JSON}.json").read_text())


@pytest.mark.parametrize("stem", list(evidence.TABLES))
def test_each_table_is_its_json_rendered(stem, committed):
    assert (GENERATED / f"{stem}.md").read_text() == evidence.TABLES[stem](committed)


def test_the_page_includes_every_table():
    page = (REPO / "docs" / "diffusers-evidence.md").read_text()
    for stem in evidence.TABLES:
        assert f"```{{include}} _generated/{stem}.md" in page
    assert "_generated/diffusers_evidence.json" in page  # the figure's data
    assert "diffusers-evidence" in (REPO / "docs" / "index.md").read_text()


def test_the_json_holds_every_model_variant_path_and_step(committed):
    steps = committed["steps"]
    assert steps == evidence.STEPS and sorted(committed["models"]) == sorted(evidence.MODELS)
    for name, model in committed["models"].items():
        spec = evidence.MODELS[name]
        assert model["class"] == spec.cls and model["latents"] == list(spec.shape)
        assert len(model["reference_rms"]) == steps
        assert "float32" in model["variants"] and "bfloat16" in model["variants"]
        for variant, row in model["variants"].items():
            paths = [p for p in evidence.PATHS if spec.branch or not p.endswith("-mps")]
            assert sorted(row["paths"]) == sorted(paths), (name, variant)
            assert ("identical" in row) == spec.branch
            for run in row["paths"].values():
                assert len(run["reference"]) == steps
                assert sorted(run["positional"]) == sorted(model["positional"])
            assert all(len(v) == steps for v in row["pairs"].values())


def test_the_pages_claims_hold_in_the_json(committed):
    for name, model in committed["models"].items():
        branch = evidence.MODELS[name].branch
        for variant, row in model["variants"].items():
            where = (name, variant)
            for path in ("sinpe", "sinpe-mps") if branch else ("sinpe",):
                run = row["paths"][path]
                assert run["warnings"] == [], where + (path,)
                assert max(run["positional"].values()) <= HALF_ULP, where + (path,)
            if branch:
                assert row["identical"] and not any(row["pairs"]["sinpe-mps - sinpe"]), where
            paths = row["paths"]
            ratio = paths["sinpe"]["reference"][-1] / paths["diffusers"]["reference"][-1]
            assert 1 / 1.5 <= ratio <= 1.5, where + (ratio,)


@pytest.fixture(scope="module")
def first_step():
    """The Flux-like model's first step in float32, along every path, and the reference."""
    spec = evidence.MODELS["Flux-like"]
    cond = evidence.conditions(spec)
    model = evidence.build(spec, mac=False)
    steps = evidence.STEPS
    runs = {path: evidence.run_path(model, spec, "float32", path, cond, steps, first=1)
            for path in evidence.PATHS}
    return runs, evidence.reference(model, spec, cond, steps, first=1)


def test_the_positional_cells_at_the_first_step(first_step, committed):
    runs, _ = first_step
    row = committed["models"]["Flux-like"]["variants"]["float32"]["paths"]
    for path, run in runs.items():
        for module, got in run["positional_first"].items():
            want = row[path]["positional_first"][module]
            if path.startswith("sinpe"):
                assert got <= HALF_ULP and want <= HALF_ULP, (path, module)
            else:
                assert got == pytest.approx(want, rel=0.25), (path, module)
    # the float32 branch's RoPE and the float32 timestep embedding are off by more than
    # sinpe's rounding: what the page is about
    assert runs["diffusers-mps"]["positional_first"]["pos_embed"] > 10 * HALF_ULP
    assert runs["diffusers"]["positional_first"]["time_text_embed.time_proj"] > 10 * HALF_ULP


def test_the_patched_branches_give_the_same_bits(first_step, committed):
    runs, _ = first_step
    same = (evidence.same_bits(runs["sinpe"]["latents"], runs["sinpe-mps"]["latents"])
            and evidence.same_bits(runs["sinpe"]["outputs"], runs["sinpe-mps"]["outputs"]))
    assert same == committed["models"]["Flux-like"]["variants"]["float32"]["identical"]
    assert not evidence.same_bits(runs["diffusers"]["outputs"], runs["diffusers-mps"]["outputs"])


def within_3x(got: float, want: float) -> bool:
    return want / 3 <= got <= 3 * want


def test_the_latent_cells_at_the_first_step(first_step, committed):
    runs, ref = first_step
    row = committed["models"]["Flux-like"]["variants"]["float32"]
    for path in ("diffusers", "sinpe"):
        got = evidence._gaps(runs[path]["latents"], ref)[0]
        assert within_3x(got, row["paths"][path]["reference"][0]), (path, got)
    branches = evidence._gaps(runs["diffusers-mps"]["latents"], runs["diffusers"]["latents"])[0]
    assert within_3x(branches, row["pairs"]["diffusers-mps - diffusers"][0]), branches
    rms = float(ref[0].pow(2).mean().sqrt())
    assert rms == pytest.approx(committed["models"]["Flux-like"]["reference_rms"][0], rel=1e-6)
