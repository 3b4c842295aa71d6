"""Every transformers family that defines rotary embeddings, through sinpe.torch.patch.

A stage of its own (``pytest tests/families``, a few minutes on two processes; the
README's test command leaves this folder out).  For each family of the installed
transformers whose modeling code defines rotary embeddings, a tiny random-init model
(:mod:`tiny`: generic rules, no per-family values) is built, patched, run and undone
in a worker process (:func:`families_battery.run`), on the CPU kernel's path and on the
device path (every device but the CPU's, run here on the CPU) in turn, and on each:

- it is served, or refused with a reason that names what sinpe did not find or could
  not reproduce; a family transformers itself cannot build is skipped with its error;
- a served family's outputs at positions 0..63 are no further from the exact reference
  (the model in float64 with exact angles, nothing of sinpe in it) than twice HF's own
  float32 outputs are, plus two ulps of the largest output: float32 noise, no family
  silently wrong;
- at positions near 2**17 (sharp attention: :mod:`families_battery`) they are no further from it
  than HF's own (plus the floor), and where HF's error there is beyond four times its
  error at 0..63 with the same sharp attention (its angles' drift shows), less than half
  of HF's;
- ``undo()`` gives back HF's outputs bit for bit, the state_dict, the module objects, no
  override left, the modeling modules' globals;
- at least 90% of the families that build are served;
- the documentation's families table (``docs/families.md``) is what this run found.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import require, require_torch
from reference.batteries import PATHS, on_path, run_all

require_torch()
require("transformers")
require("scipy", "the families page: transformers builds EoMT-DINOv3 only with it")
import tiny  # noqa: E402
from families_table import TABLE, render  # noqa: E402

HERE = Path(__file__).resolve().parent
FAMILIES = tiny.rope_families()


@pytest.fixture(scope="session")
def results() -> dict:
    """Every family's result, two worker processes (each family in a fresh model)."""
    import families_battery

    return run_all(HERE, FAMILIES, families_battery.run)


SPECIFIC = re.compile(r"has no rotary position embedding that sinpe finds|"
                      r"refuses the .+ family: (the (rotary module|sin/cos table) .+|"
                      r"its attention calls .+, but no rotary module)")


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("family", FAMILIES)
def test_family(family, path, results):
    result = on_path(results[family], path)
    if result["status"] == "cannot build":
        pytest.skip(f"transformers cannot build a tiny {family}: {result['why']}")
    if result["status"] == "refused":
        assert SPECIFIC.search(result["why"]), result["why"]
        assert result["why"].endswith("the model was not changed")
        return
    assert result["status"] != "crash", result["why"]
    assert result["status"] == "served", result
    assert result["rotary"], result
    assert all(result["undo"].values()), result["undo"]
    if "patched_error" not in result:  # no forward found, integer outputs, no float64 run
        assert result["kind"] == "none" or "output" in result or "reference" in result, result
        return
    assert result["finite"]
    assert result["patched_error"] <= 2 * result["hf_error"] + result["floor"], result
    if "far_patched_error" in result:
        sinpe, hf, floor = (result["far_patched_error"], result["far_hf_error"],
                            result["far_floor"])
        assert sinpe <= hf + floor, result
        noise = result["sharp_noise"] + floor  # HF's error at 0..63, attention as sharp
        if hf > 4 * noise:  # HF's drift shows: sinpe's error is well below it
            assert sinpe < hf / 2, result


@pytest.mark.parametrize("path", PATHS)
def test_most_families_are_served(path, results):
    built = [on_path(r, path) for r in results.values() if r["status"] != "cannot build"]
    served = [r for r in built if r["status"] == "served"]
    assert len(served) >= 0.9 * len(built), (len(served), len(built))


def test_the_documentations_table_is_this_runs(results):
    """``python tests/families/families_table.py`` writes it (the same run as this stage)."""
    assert TABLE.read_text() == render(results), (
        "docs/families.md is not what this run found: regenerate it with "
        "`python tests/families/families_table.py`")
