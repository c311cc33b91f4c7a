"""NUTS's run sizes are written once (adaptive/estimation/run_sizes.py) and every door takes them."""

import re
from pathlib import Path

from adaptive.estimation import run_sizes
from adaptive.estimation.fitting import preset_config
from adaptive.estimation.streaming import stream_config
from services.settings import Settings

ROOT = Path(__file__).resolve().parents[3]
SIZES = (run_sizes.NUTS_WARMUP, run_sizes.NUTS_DRAWS, run_sizes.NUTS_MIN_ESS)


def test_every_door_runs_nuts_with_the_one_definition():
    import evalset

    for config in (
        preset_config("default", method="nuts"),
        preset_config("paper"),  # the published model runs NUTS
        stream_config("nuts"),  # the service's scheduled refits
        evalset._fit_config(method="nuts"),
    ):
        assert (config.num_warmup, config.num_samples, config.min_ess) == SIZES, config
    settings = Settings()
    assert (settings.nuts_warmup, settings.nuts_samples) == SIZES[:2]
    assert settings.nuts_min_ess == 0.0  # the service's scheduled refits: one block, R-hat gate
    # what the user chooses stays chosen; a sampler without blocks gets no ESS target
    assert preset_config("default", method="nuts", num_samples=700).num_samples == 700
    assert preset_config("default", method="nuts", sampler="diagonal").min_ess is None
    assert preset_config("default", method="fast").min_ess is None


def test_the_sizes_are_assigned_in_one_module():
    pattern = re.compile(r"^\s*(num_warmup|nuts_warmup|NUTS_WARMUP)\b[^=\n]*=\s*(\d+)", re.M)
    found = {
        path.relative_to(ROOT).as_posix()
        for package in ("adaptive", "evalset", "services")
        for path in (ROOT / package).rglob("*.py")
        for m in pattern.finditer(path.read_text())
        if int(m.group(2)) == run_sizes.NUTS_WARMUP
    }
    assert found == {"adaptive/estimation/run_sizes.py"}
