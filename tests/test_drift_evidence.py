"""The drift page's tables are what the scripts in examples/drift/ compute.

docs/drift.md includes docs/_generated/drift_*.md, each written with its JSON by one
command (``python examples/drift/evaluate.py --write docs/_generated``,
``python examples/drift/measure.py --write docs/_generated``).  Here: each Markdown
file is its script's rendering of the committed JSON, and cells of the JSON are
computed again.  The trained models' accuracy counts must match exactly (an answer is
an argmax, which float32 noise moves only at a near-tie: the models' margins are wide).
Scores and logits are differences of nearly equal float32 numbers, whose last bits
depend on the CPU's matrix kernels: where transformers' drift dominates them (offsets
2**20 and beyond) they must agree within 1%, and sinpe's stay at float32 noise (below
1e-4 for scores of unit size, 1e-3 for logits).  The weights of the models are small
(under 5 MB together) and ship in the sdist, not the wheel.
"""
from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest
from conftest import require, require_torch

torch = require_torch()
transformers = require("transformers")

REPO = Path(__file__).resolve().parents[1]
DRIFT = REPO / "examples" / "drift"
GENERATED = REPO / "docs" / "_generated"


def script(name: str):
    """examples/drift/NAME.py as a module (under a name no package on sys.path has)."""
    spec = importlib.util.spec_from_file_location(f"drift_example_{name}", DRIFT / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


evaluate = script("evaluate")
measure = script("measure")
train = script("train")


def committed(stem: str) -> dict:
    return json.loads((GENERATED / f"{stem}.json").read_text())


@pytest.mark.parametrize("stem, render", [
    ("drift_accuracy", evaluate.markdown),
    ("drift_attention", measure.attention_markdown),
    ("drift_families", measure.families_markdown),
])
def test_each_table_is_its_json_rendered(stem, render):
    assert (GENERATED / f"{stem}.md").read_text() == render(committed(stem))


def test_the_page_includes_every_table():
    page = (REPO / "docs" / "drift.md").read_text()
    for stem in ("drift_accuracy", "drift_attention", "drift_families"):
        assert f"```{{include}} _generated/{stem}.md" in page


@pytest.mark.parametrize("name, offsets", [
    ("lag float32", (0, 2**23)),
    ("long float32", (2**20,)),
    ("pairs float32", (2**22,)),
    ("lag bfloat16", (0,)),
])
def test_accuracy_cells_are_what_the_evaluation_computes(name, offsets):
    results = committed("drift_accuracy")
    assert results["offsets"] == list(evaluate.OFFSETS)
    task, dtype = name.split()
    model = evaluate.load(task, dtype)
    x, right = evaluate.sequences(task)
    torch.set_num_threads(1)
    for mode in ("hf", "sinpe"):
        at_zero = evaluate.answers(model, task, x, 0, mode)
        for s in offsets:
            got = evaluate.cell(model, task, mode, s, x, right, at_zero)
            assert got == results["models"][name][mode][evaluate.OFFSETS.index(s)], (mode, s)


def test_attention_cells_are_what_the_measurement_computes():
    results = committed("drift_attention")
    again = measure.attention(offsets=(2**20, 2**23))
    for shape, row in again["shapes"].items():
        if not shape.endswith("float32"):
            continue  # bfloat16: the product's own rounding, not the drift
        want = results["shapes"][shape]
        for i, s in enumerate((2**20, 2**23)):
            j = results["positions"].index(s)
            assert row["scores_hf"][i] == pytest.approx(want["scores_hf"][j], rel=0.01)
            assert row["scores_sinpe"][i] < 1e-4 and want["scores_sinpe"][j] < 1e-4


def test_a_family_row_is_what_drift_computes():
    results = committed("drift_families")["families"]
    name = next(iter(measure.FAMILIES))
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(measure.FAMILIES[name]()).eval()
    with torch.no_grad():
        measure.sharpen(model)
    ids = torch.randint(0, 256, (1, 128), generator=torch.Generator().manual_seed(0))
    import sinpe.torch

    got = sinpe.torch.drift(model, ids, positions=[2**22])
    want = results[name]
    assert got["logits_hf"][0] == pytest.approx(want["logits_hf"][-1], rel=0.01)
    assert got["logits_sinpe"][0] < 1e-3 and want["logits_sinpe"][-1] < 1e-3


def test_the_weights_are_small_and_in_the_sdist_only():
    files = sorted((DRIFT / "models").glob("*/*"))
    assert {f.name for f in files} >= {"config.json", "model.safetensors", "training.json"}
    assert sum(f.stat().st_size for f in files) <= 5 * 2**20
    manifest = (REPO / "MANIFEST.in").read_text()
    assert "examples/drift/models/*/*.safetensors" in manifest
    assert "docs/_generated *.json" in manifest
    pyproject = (REPO / "pyproject.toml").read_text()
    packages = re.search(r"^packages = (\[[^]]*\])", pyproject, re.M)
    assert packages and all(p.startswith("sinpe") for p in json.loads(packages.group(1)))


def test_the_models_are_what_the_training_command_makes():
    # each model's training.json is train.py's record of the documented command (its
    # defaults), the evaluation's JSON carries the same records, and the configs are
    # train.py's: Llama 3's heads of 128 and rope theta 500000
    results = committed("drift_accuracy")
    assert sorted(results["training"]) == sorted(train.STEPS) == sorted(evaluate.TASKS)
    want = train.model_config().to_dict()
    for task, record in results["training"].items():
        assert json.loads((DRIFT / "models" / task / "training.json").read_text()) == record
        assert (record["steps"], record["batch"], record["seed"], record["threads"]) == (
            train.STEPS[task], train.BATCH[task], 0, 1)
        assert record["start"] == train.START.get(task)
        config = json.loads((DRIFT / "models" / task / "config.json").read_text())
        for key in ("head_dim", "hidden_size", "num_attention_heads", "num_hidden_layers",
                    "vocab_size"):
            assert config[key] == want[key], (task, key)
        assert config["head_dim"] == 128
        assert (config.get("rope_parameters") or {}).get("rope_theta",
                                                          config.get("rope_theta")) == 500000.0

