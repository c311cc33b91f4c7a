"""The approximation's settings travel whole: one hashable value per inference, each default
written once, beside the model key in the compile keys; the fast path in named steps."""

from __future__ import annotations

import ast
import inspect
from dataclasses import fields
from pathlib import Path

import jax
import numpy as np
import pytest

from stan_free_models.fit_settings import DOOR_NUTS, REFINED, LaplaceSettings, NutsSettings

ROOT = Path(__file__).resolve().parents[2]
#: the one module that writes the run sizes of NUTS (and of the fast path)
SETTINGS_MODULE = "stan_free_models/fit_settings.py"


def warmup_literals(source: str, filename: str = "<source>") -> list[str]:
    """``file:line`` of every warm-up length written as a number: a keyword, an assignment, a
    parameter default or a command-line default of something named ``*warmup*``."""

    def number(node: ast.AST | None) -> bool:
        return isinstance(node, ast.Constant) and type(node.value) is int

    def named(name: str | None) -> bool:
        return name is not None and "warmup" in name.lower()

    found = []
    for node in ast.walk(ast.parse(source, filename)):
        hit = False
        if isinstance(node, ast.keyword):
            hit = named(node.arg) and number(node.value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            hit = named(node.target.id) and number(node.value)
        elif isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            hit = any(named(n) for n in names) and number(node.value)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            pairs = list(zip(reversed(args.args), reversed(args.defaults)))
            pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
            hit = any(named(a.arg) and number(d) for a, d in pairs)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            flag = node.args[0].value
            default = next((k.value for k in node.keywords if k.arg == "default"), None)
            hit = isinstance(flag, str) and named(flag) and number(default)
        if hit:
            found.append(f"{filename}:{getattr(node, 'lineno', '?')}")
    return sorted(set(found))


def test_every_warm_up_length_is_written_in_one_module():
    hits = []
    for package in ("stan_free_models", "adaptive", "evalset", "services"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel != SETTINGS_MODULE:
                hits += warmup_literals(path.read_text(), rel)
    assert hits == [], "\n".join(hits)


def test_the_warm_up_scan_finds_every_way_of_writing_one():
    bad = (
        "def fit(data, *, num_warmup: int = 1000): ...\n"
        "class C:\n    num_warmup: int = 500\n"
        "NUTS_WARMUP = 300\n"
        'p.add_argument("--warmup", type=int, default=500)\n'
        "fit_nuts(data, num_warmup=200)\n"
        "p.set_defaults(warmup=500)\n"
    )
    assert warmup_literals(bad) == [f"<source>:{n}" for n in (1, 3, 4, 5, 6, 7)]
    good = "class C:\n    num_warmup: int = NutsSettings.num_warmup\nfit(num_warmup=args.warmup)\n"
    assert warmup_literals(good) == []


def test_the_configuration_holds_the_settings_whole_and_maps_the_doors_names():
    from adaptive.estimation.fitting import FitConfig, preset_config
    from stan_free_models.model_key import Priors

    own = {f.name for f in fields(FitConfig)}
    parts = {f.name for f in fields(LaplaceSettings)} | {f.name for f in fields(NutsSettings)}
    assert not own & (parts | set(Priors._fields)), "a setting is duplicated beside its part"
    config = FitConfig()
    assert config.laplace == LaplaceSettings() and config.nuts == NutsSettings()
    # the doors' flat names land in their part; the rest keeps its defaults
    chosen = FitConfig(num_draws=400, num_warmup=50, theta_scale=2, thresholds="symmetric")
    assert chosen.laplace == LaplaceSettings(num_draws=400)
    assert chosen.nuts == NutsSettings(num_warmup=50)
    assert chosen.priors == Priors(theta_scale=2.0, symmetric=True)
    assert hash(chosen) == hash(
        FitConfig(num_draws=400, num_warmup=50, theta_scale=2.0, thresholds="symmetric")
    )
    with pytest.raises(TypeError, match="unexpected keyword argument 'num_draw'"):
        FitConfig(num_draw=400)
    with pytest.raises(ValueError, match="refine_below"):
        FitConfig(refine_below=-1.0)
    # the doors' NUTS and the command line's model-based fast path are named values
    nuts = preset_config("default", method="nuts").nuts
    assert nuts.replace(num_chains=DOOR_NUTS.num_chains) == DOOR_NUTS
    assert (REFINED.exact_items, REFINED.refine_sweeps > 0) == (True, True)


def _small_cells():
    from adaptive.core.cells import build_cells
    from adaptive.core.data import read_judgments

    judgments = read_judgments(ROOT / "data" / "ai_teacher_test" / "judgments.csv")
    return build_cells(judgments, dimension="helpfulness")


def test_the_fast_path_defaults_are_the_default_models():
    """``fit_laplace`` with its defaults runs the approximation ``FitConfig()`` asks for (it
    drew exact items and refined while the configuration did neither)."""
    from adaptive.estimation.fitting import FitConfig, fit_cells, model_data
    from stan_free_models.laplace import fit_laplace

    cells = _small_cells()
    config = FitConfig(robust=False, num_draws=300)
    data = model_data(cells, likelihood=config.likelihood)
    direct = fit_laplace(data, rng_key=jax.random.PRNGKey(config.seed), num_draws=300)
    through = fit_cells(cells, config)
    np.testing.assert_array_equal(direct.draws["theta"], through.draws["theta"])
    np.testing.assert_array_equal(direct.draws["b"], through.draws["b"])
    assert "items_exact" not in direct.info


def test_the_laplace_settings_sit_beside_the_model_key_in_the_compile_key():
    from stan_free_models.inference import GRMData, _static_key, pad_data
    from stan_free_models.laplace_program import _compiled_laplace

    data = GRMData(
        comparison=np.zeros(2, np.int32),
        item=np.zeros(2, np.int32),
        y=np.array([0, 2], np.int32),
        weight=np.ones(2, np.float32),
        num_comparisons=1,
        num_items=1,
        num_categories=3,
    )
    static = _static_key(pad_data(data))
    settings = LaplaceSettings(num_draws=7)
    program = _compiled_laplace(static, settings)
    # what the host reads (the grid, the refinement, the tolerance) compiles nothing new
    same = settings.replace(refine_below=1.0, exact_items=True, tol=0.5, integrate_tau=False)
    assert _compiled_laplace(static, same) is program
    assert _compiled_laplace(static, settings.replace(num_draws=8)) is not program
    assert {settings: 1}[LaplaceSettings(num_draws=7)] == 1  # hashable, equal by value


@pytest.mark.parametrize("module", ["laplace.py", "laplace_program.py"])
def test_the_fast_path_is_named_steps_each_under_80_lines(module):
    tree = ast.parse((ROOT / "stan_free_models" / module).read_text())
    long = [
        f"{node.name}: {node.end_lineno - node.lineno + 1} lines"
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > 80
    ]
    assert long == []


def test_fit_laplace_takes_the_settings_whole():
    from stan_free_models.laplace import fit_laplace

    params = inspect.signature(fit_laplace).parameters
    assert params["settings"].default == LaplaceSettings()
    # every other setting arrives as an override of the settings' own fields
    loose = {f.name for f in fields(LaplaceSettings)} & set(params)
    assert loose == set()
