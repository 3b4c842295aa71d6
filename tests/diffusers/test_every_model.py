"""Every diffusers model class with positional code, through sinpe.torch.patch.

A stage of its own, with tests/families (``pytest tests/diffusers``; the README's test
command leaves this folder out).  For each model class of the installed diffusers whose
code has positional code, a tiny random-init model (:mod:`dtiny`: generic rules, no
per-model values) is built, patched, run for two denoising steps and undone in a worker
process (:func:`diffusers_battery.run`), on the CPU kernel's path and on the device path
(every device but the CPU's, run here on the CPU) in turn, and on each:

- it is served, or refused with a reason that names what sinpe did not find; a class
  whose tiny model does not run a forward here is patched and undone all the same
  (what patch finds and checks before it changes anything needs no forward), and only
  its outputs go unmeasured;
- a served model is no further from the exact reference (the model in float64 with its
  positional code's angles exact, nothing of sinpe in it) than twice diffusers' own
  float32 outputs are, plus two ulps of the largest output, at both steps: none is
  silently wrong;
- on the device path a denoising step reads no more tensor values on the host than
  diffusers' own (the battery names the stand-ins kept by their positions' values);
- ``undo()`` gives back diffusers' outputs bit for bit, the state_dict, the module
  objects, no override left, the modeling modules' globals;
- at least 90% of the classes that build are served, and of those whose tiny model runs;
- the documentation's table (``docs/diffusers-models.md``) is what this run found.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from conftest import require, require_torch
from reference.batteries import PATHS, on_path, run_all

require_torch()
require("diffusers")
require("scipy", "the models page: generated with the families extra installed")
import dtiny  # noqa: E402
from diffusers_table import TABLE, render  # noqa: E402

HERE = Path(__file__).resolve().parent
CLASSES = dtiny.positional_classes()


@pytest.fixture(scope="session")
def results() -> dict:
    """Every class's result, two worker processes (each class in a fresh model)."""
    import diffusers_battery

    return run_all(HERE, CLASSES, diffusers_battery.run)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", CLASSES)
def test_model(name, path, results):
    result = on_path(results[name], path)
    if result["status"] == "cannot build":
        pytest.skip(f"the tiny {name} does not build here: {result['why']}")
    if result["status"] == "refused":
        assert "has no positional code that sinpe stands in for" in result["why"], result
        assert result["why"].endswith("the model was not changed")
        return
    assert result["status"] != "crash", result["why"]
    assert result["status"] == "served", result
    assert result["rotary"] or result["functions"], result
    assert all(result["undo"].values()), result["undo"]
    if "unrun" in result:
        pytest.skip(f"patched and undone; the tiny {name}'s outputs are not measured: its "
                    f"forward does not run here ({result['unrun']})")
    if path == "device" and None not in result["reads"].values():
        reads = result["reads"]  # (by_value: the stand-ins kept by their positions' values)
        assert reads["patched"] <= reads["diffusers"], (reads, result["by_value"])
    if "patched_error" not in result:  # integer outputs, or no float64 run
        assert "output" in result or "reference" in result, result
        return
    assert result["finite"]
    for ours, theirs, floor in zip(result["patched_error"], result["diffusers_error"],
                                   result["floor"]):
        assert ours <= 2 * theirs + floor, result


@pytest.mark.parametrize("path", PATHS)
def test_most_models_are_served(path, results):
    built = [on_path(r, path) for r in results.values() if r["status"] != "cannot build"]
    ran = [r for r in built if "unrun" not in r]
    for group in (built, ran):
        served = [r for r in group if r["status"] == "served"]
        assert len(served) >= 0.9 * len(group), (len(served), len(group))


def test_the_documentations_table_is_this_runs(results):
    """``python tests/diffusers/diffusers_table.py`` writes it (the same run as this stage)."""
    assert TABLE.read_text() == render(results), (
        "docs/diffusers-models.md is not what this run found: regenerate it with "
        "`python tests/diffusers/diffusers_table.py`")
