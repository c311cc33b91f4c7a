"""NUTS's run sizes are written once (stan_free_models.fit_settings.DOOR_NUTS) and every door
takes them (that no other module writes a warm-up: tests/stan_free_models/test_fit_settings.py)."""

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
        assert (config.nuts.num_warmup, config.nuts.num_samples, config.nuts.min_ess) == SIZES
    settings = Settings()
    assert (settings.nuts_warmup, settings.nuts_samples) == SIZES[:2]
    assert settings.nuts_min_ess == 0.0  # the service's scheduled refits: one block, R-hat gate
    # what the user chooses stays chosen; a sampler without blocks gets no ESS target
    assert preset_config("default", method="nuts", num_samples=700).nuts.num_samples == 700
    assert preset_config("default", method="nuts", sampler="diagonal").nuts.min_ess is None
    assert preset_config("default", method="fast").nuts.min_ess is None
