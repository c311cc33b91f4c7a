"""One model spec: the priors travel whole below FitConfig, and the three doors share one
default model (issue 43, items 1 and 6)."""

from __future__ import annotations

import ast
from dataclasses import asdict, fields
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[3]

#: prior settings that may not travel as loose parameters below the model spec
LOOSE_PRIORS = frozenset(
    {"alpha_scale", "b_scale", "theta_scale", "tau_scale", "symmetric_thresholds", "symmetric"}
)
#: the simulators generate truth; they are not the model and keep their own scales
NOT_THE_MODEL = {"stan_free_models/simulate.py"}

#: FitConfig's fields that say how long to run, not which model
RUN_FIELDS = frozenset(
    {"num_chains", "num_warmup", "num_samples", "num_draws", "min_ess", "seed", "progress"}
)


def loose_prior_parameters(source: str, filename: str = "<source>") -> list[str]:
    """``file:line function(parameter)`` for every parameter that is a loose prior setting:
    one named in :data:`LOOSE_PRIORS`, or a ``lapse`` switch annotated ``bool``."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        args = node.args
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
            switch = (
                arg.arg == "lapse"
                and arg.annotation is not None
                and ast.unparse(arg.annotation) == "bool"
            )
            if arg.arg in LOOSE_PRIORS or switch:
                name = getattr(node, "name", "<lambda>")
                found.append(f"{filename}:{node.lineno} {name}({arg.arg})")
    return found


def test_no_prior_setting_travels_as_a_loose_argument_below_the_model_spec():
    """Every function of the engine and the orchestration takes the priors whole
    (``priors: Priors``), so a new prior or variant is one field, not a dozen signatures."""
    hits = []
    for package in ("stan_free_models", "adaptive"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel not in NOT_THE_MODEL:
                hits += loose_prior_parameters(path.read_text(), rel)
    assert hits == [], "\n".join(hits)


def test_the_scan_finds_loose_prior_arguments():
    bad = (
        "def fit(data, *, rng_key, b_scale=2.0):\n    pass\n"
        "class K:\n    def of(self, symmetric: bool = False, lapse: bool = False): ...\n"
        "key = lambda theta_scale: theta_scale\n"
    )
    assert loose_prior_parameters(bad) == [
        "<source>:1 fit(b_scale)",
        "<source>:4 of(symmetric)",
        "<source>:4 of(lapse)",
        "<source>:5 <lambda>(theta_scale)",
    ]
    # the priors whole, and lapse draws (an array, not the switch), are fine
    good = (
        "def fit(data, *, priors: Priors = DEFAULT_PRIORS, lapse: np.ndarray | None = None): ...\n"
    )
    assert loose_prior_parameters(good) == []


def _model(config) -> dict:
    """The settings of a FitConfig that define the model (the run's length left out), by name."""
    flat = {k: v for k, v in asdict(config).items() if k not in ("priors", "laplace", "nuts")}
    flat |= config.priors._asdict() | asdict(config.laplace) | asdict(config.nuts)
    return {k: v for k, v in flat.items() if k not in RUN_FIELDS}


def _doors(parameterization: str) -> dict[str, object]:
    """The default configuration of every door, for one parameterisation."""
    from adaptive.estimation.fitting import FitConfig, preset_config
    from evalset import _fit_config
    from services.cli import build_parser
    from services.cli.analysis import fit_config

    argv = ["significance", "--data", "x", "--parameterization", parameterization]
    doors = {
        "resolver": preset_config(parameterization=parameterization),
        "cli": fit_config(build_parser().parse_args(argv)),
        "python": _fit_config(parameterization=parameterization),
    }
    if parameterization == "comparison":
        doors["FitConfig()"] = FitConfig()
    else:
        from adaptive.estimation.streaming import stream_config
        from services.settings import Settings

        # as the service's worker builds it (services.api.refresher)
        settings = Settings(database_url="sqlite:///:memory:")
        doors["service"] = stream_config("fast", cell_effect=settings.cell_effect)
    return doors


@pytest.mark.parametrize("parameterization", ["comparison", "system"])
def test_the_doors_default_to_one_model(parameterization):
    """The command line, evalset.fit, the service and FitConfig's field defaults resolve
    their defaults through one definition of the default model."""
    doors = _doors(parameterization)
    models = {name: _model(config) for name, config in doors.items()}
    reference = models["resolver"]
    for name, model in models.items():
        assert model == reference, name
    # it is the default model the presets describe: one fast fit with robust intervals
    assert reference["method"] == "fast" and reference["robust"]
    assert not reference["cell_effect"] and not reference["lapse"]
    assert reference["symmetric"] == (parameterization == "system")
    assert len({config.priors for config in doors.values()}) == 1


def test_the_doors_comparison_catches_a_door_that_drifts():
    from adaptive.estimation.fitting import FitConfig, preset_config

    assert _model(FitConfig(num_draws=10, seed=3)) == _model(preset_config())
    assert _model(FitConfig(b_scale=5.0)) != _model(preset_config())
    assert _model(FitConfig(robust=False)) != _model(preset_config())


def test_the_spec_is_hashable_and_equal_specs_are_one_compile_key():
    from adaptive.estimation.fitting import preset_config
    from stan_free_models.inference import GRMData, ModelKey, _static_key, pad_data
    from stan_free_models.model_key import DEFAULT_PRIORS, Priors

    data = pad_data(
        GRMData(
            comparison=np.zeros(2, np.int32),
            item=np.zeros(2, np.int32),
            y=np.array([0, 2], np.int32),
            weight=np.ones(2, np.float32),
            num_comparisons=1,
            num_items=1,
            num_categories=3,
        )
    )
    # built twice from the user's settings: equal, and one key
    first = preset_config(theta_scale=3, b_scale=2).priors
    again = preset_config(theta_scale=3.0).priors
    assert first == again and hash(first) == hash(again)
    key = _static_key(data, first)
    assert isinstance(key, ModelKey) and key == _static_key(data, again)
    assert hash(key) == hash(_static_key(data, again))
    assert {key: "compiled"}[_static_key(data, again)] == "compiled"
    # ints and floats of the same value are one key, with fixed types
    assert type(key.priors.theta_scale) is float and type(key.priors.symmetric) is bool
    # the priors are part of the key; the default is written once
    assert _static_key(data, Priors(theta_scale=2.0)) != _static_key(data)
    assert _static_key(data).priors == DEFAULT_PRIORS == preset_config().priors
    assert key.sizes == _static_key(data).sizes  # the sizes alone: no priors in them
    # the configuration holds the priors whole: no prior travels beside them as a field
    assert isinstance(preset_config().priors, Priors)
    assert not {f.name for f in fields(preset_config())} & set(Priors._fields)


def test_the_fits_read_the_priors_from_the_spec():
    """The spec's settings reach the model: the potential moves by exactly the prior's change."""
    import jax.numpy as jnp
    from scipy.stats import norm

    from stan_free_models import inference
    from stan_free_models.model_key import Priors

    data = inference.pad_data(
        inference.GRMData(
            comparison=np.zeros(1, np.int32),
            item=np.zeros(1, np.int32),
            y=np.ones(1, np.int32),
            weight=np.ones(1, np.float32),
            num_comparisons=1,
            num_items=1,
            num_categories=3,
        )
    )
    args = inference._dynamic_args(data)
    items = jnp.asarray(np.random.default_rng(0).normal(0, 0.5, (data.num_items, 3)), jnp.float32)
    g = jnp.zeros(data.num_comparisons)

    def potential(priors: Priors) -> float:
        static = inference._static_key(data, priors)
        return float(
            inference._potential_fn(static)(inference._split_params(static, g, items), *args)
        )

    log_alpha = np.asarray(items[:, 0], np.float64)
    expected = norm.logpdf(log_alpha, 0, 3).sum() - norm.logpdf(log_alpha, 0, 1).sum()
    assert potential(Priors()) - potential(Priors(alpha_scale=3.0)) == pytest.approx(
        expected, rel=1e-4
    )
