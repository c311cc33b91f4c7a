"""Fast path and NUTS for the graded response model: agreement, warm starts, compile reuse."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from stan_free_models import inference, laplace
from stan_free_models.fit_settings import REFINED
from stan_free_models.inference import GRMData, bucket, pad_data
from stan_free_models.laplace import fit_laplace
from stan_free_models.model_key import Priors
from stan_free_models.nuts import fit_nuts
from stan_free_models.simulate import draw_truth, simulate_net_ratings

#: the key every fit here used before keys were required
KEY = jax.random.PRNGKey(0)
#: draws per fast fit: enough for means and sds to two digits; the refinement sweeps cost
#: time in proportion to the draws, and these tests are about the fit, not the draw count
DRAWS = 200
#: the fast path with the model's exact conditionals (exact item draws and Gibbs sweeps)
FAST = REFINED.replace(num_draws=DRAWS)


def small_problem(seed: int, num_comparisons: int = 8, num_items: int = 60) -> tuple:
    rng = np.random.default_rng(seed)
    truth = draw_truth(rng, num_comparisons, num_items, 7)
    return truth, simulate_net_ratings(rng, truth)


def test_buckets_grow_by_at_most_half():
    sizes = [bucket(n) for n in range(1, 5000)]
    assert all(s >= n for n, s in zip(range(1, 5000), sizes))
    assert all(s <= max(8, 1.5 * n) for n, s in zip(range(1, 5000), sizes))
    assert len(set(sizes)) < 25


def test_padding_keeps_real_observations_and_zero_weights_the_rest():
    _, data = small_problem(0)
    padded = pad_data(data)
    n = data.num_obs
    assert padded.num_obs >= n and padded.num_comparisons >= data.num_comparisons
    assert np.array_equal(padded.y[:n], data.y)
    assert np.all(padded.weight[n:] == 0)


def test_laplace_recovers_abilities_on_a_small_simulation():
    truth, data = small_problem(1, num_comparisons=12, num_items=120)
    post = fit_laplace(data, rng_key=KEY, settings=FAST)
    assert post.diagnostics.converged
    assert np.corrcoef(post.mean("theta"), truth.theta)[0, 1] > 0.95
    z = (post.mean("theta") - truth.theta) / post.sd("theta")
    assert np.mean(np.abs(z) < 2.58) >= 0.8  # 99% intervals: allow a couple of misses


def subset(data: GRMData, n: int) -> GRMData:
    return GRMData(
        **{
            **data.__dict__,
            "comparison": data.comparison[:n],
            "item": data.item[:n],
            "y": data.y[:n],
            "weight": data.weight[:n],
        }
    )


def test_laplace_is_compiled_once_per_bucket_and_warm_start_saves_steps():
    _, full = small_problem(2)  # 480 observations
    earlier = subset(full, 440)  # the snapshot before the last batch; same bucket (512)
    first = fit_laplace(earlier, rng_key=KEY, settings=FAST)
    traces = inference.TRACE_COUNTS["laplace"]
    cold = fit_laplace(full, rng_key=KEY, settings=FAST)
    assert inference.TRACE_COUNTS["laplace"] == traces  # a new batch does not recompile
    warm = fit_laplace(full, rng_key=KEY, init=first.mode, settings=FAST)
    assert inference.TRACE_COUNTS["laplace"] == traces
    assert warm.diagnostics.num_steps < cold.diagnostics.num_steps
    # small data can have several nearby modes: they agree well within the posterior sd
    assert np.all(np.abs(warm.mean("theta") - cold.mean("theta")) < 0.5 * cold.sd("theta"))


def test_laplace_warm_start_accepts_grown_problem():
    truth, data = small_problem(4, num_comparisons=6, num_items=40)
    post = fit_laplace(data, rng_key=KEY, settings=FAST)
    bigger = GRMData(
        comparison=np.concatenate([data.comparison, [6, 6, 6]]),
        item=np.concatenate([data.item, [0, 1, 40]]),
        y=np.concatenate([data.y, [6, 6, 5]]),
        weight=np.ones(data.num_obs + 3),
        num_comparisons=7,
        num_items=41,
        num_categories=7,
    )
    grown = fit_laplace(bigger, rng_key=KEY, init=post.mode, settings=FAST)
    assert grown.draws["theta"].shape[-1] == 7
    assert grown.mean("theta")[6] > 0.5  # three strong B wins


def test_per_system_parameterisation_gives_differences_of_skills():
    rng = np.random.default_rng(5)
    pairs = [(a, b) for a in range(5) for b in range(a + 1, 5)]
    pair_a = np.array([a for a, _ in pairs])
    pair_b = np.array([b for _, b in pairs])
    truth = draw_truth(rng, len(pairs), 80, 3, num_systems=5, pair_a=pair_a, pair_b=pair_b)
    base = simulate_net_ratings(rng, truth)
    data = GRMData(**{**base.__dict__, "pair_a": pair_a, "pair_b": pair_b, "num_systems": 5})
    post = fit_laplace(data, rng_key=KEY, settings=FAST)
    skill = post.draws["skill"][0]
    theta = post.draws["theta"][0]
    assert np.allclose(theta, skill[:, pair_b] - skill[:, pair_a])
    assert np.corrcoef(post.mean("theta"), truth.theta)[0, 1] > 0.95


def test_invalid_data_is_refused():
    _, data = small_problem(6)
    bad = GRMData(**{**data.__dict__, "y": data.y + 7})
    with pytest.raises(ValueError, match="y must lie"):
        fit_laplace(bad, rng_key=KEY)


def test_nuts_and_laplace_agree_and_nuts_reports_diagnostics():
    truth, data = small_problem(7, num_comparisons=5, num_items=40)
    nuts = fit_nuts(
        data,
        rng_key=jax.random.PRNGKey(0),
        num_chains=2,
        num_warmup=250,
        num_samples=250,
        chain_method="sequential",
    )
    fast = fit_laplace(data, rng_key=KEY, settings=FAST)
    d = nuts.diagnostics
    assert set(d.rhat) == {"theta", "log_alpha", "b"}
    assert d.max_rhat() < 1.05
    assert d.min_ess_bulk() > 50
    assert nuts.draws["theta"].shape == (2, 250, 5)
    # the Laplace centre is the joint mode, NUTS gives the posterior mean: close relative to the sd
    assert np.all(np.abs(nuts.mean("theta") - fast.mean("theta")) < 0.75 * nuts.sd("theta"))
    ratio = fast.sd("theta") / nuts.sd("theta")
    assert np.all((ratio > 0.7) & (ratio < 1.4))


def test_symmetric_thresholds_recover_and_stay_symmetric():
    rng = np.random.default_rng(8)
    truth = draw_truth(rng, 10, 100, 3)
    d = np.abs(rng.normal(0.0, 1.5, 100)) + 0.1
    truth = type(truth)(theta=truth.theta, alpha=truth.alpha, b=np.stack([-d, d], axis=1))
    data = simulate_net_ratings(rng, truth)
    post = fit_laplace(data, rng_key=KEY, priors=Priors(symmetric=True), settings=FAST)
    b = post.flat("b")
    assert b.shape[-1] == 2
    assert np.allclose(b[..., 0], -b[..., 1])
    assert np.corrcoef(post.mean("theta"), truth.theta)[0, 1] > 0.9


def test_bucket_refuses_a_minimum_that_cannot_grow():
    with pytest.raises(ValueError, match="at least 2"):
        bucket(5, minimum=1)
    assert bucket(5, minimum=2) == 6


def test_unusable_warm_start_falls_back_to_a_cold_start():
    _, data = small_problem(9)
    cold = fit_laplace(data, rng_key=KEY, settings=FAST)
    poisoned = {k: np.full_like(v, 1e6) for k, v in cold.mode.items()}
    rescued = fit_laplace(data, rng_key=KEY, init=poisoned, settings=FAST)
    assert rescued.info["restarted_cold"]
    assert rescued.diagnostics.converged
    assert rescued.info["potential"] == pytest.approx(cold.info["potential"], rel=1e-4)


def test_fits_in_several_threads_do_not_corrupt_each_others_traces():
    # NumPyro's handler stack is process-wide: concurrent traces need the model lock
    import threading

    # the shapes of the fits above, each traced afresh (in-memory programs are dropped)
    problems = [small_problem(20)[1], *(small_problem(20 + i, 4 + i, 40)[1] for i in (1, 2))]
    jax.clear_caches()
    errors: list[BaseException] = []

    def work(data):
        try:
            # the fits above, traced again: their compiled programs are loaded from disk
            fit = fit_laplace(data, rng_key=KEY, settings=FAST)
            assert fit.diagnostics.converged
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(d,)) for d in problems]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_tau_grid_weights_integrate_a_known_marginal_on_an_uneven_grid():
    log_tau = np.array([-3.0, -2.0, -1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 1.0, 2.0])
    log_marginal = -0.5 * ((log_tau + 0.25) / 0.6) ** 2  # N(-0.25, 0.6) in log tau
    w = laplace._tau_weights(log_tau, log_marginal)
    assert w.sum() == pytest.approx(1.0)
    assert (w * log_tau).sum() == pytest.approx(-0.25, abs=0.03)
    # a grid point whose fit failed (non-finite marginal) gets no weight
    w = laplace._tau_weights(log_tau, np.where(log_tau > 1.5, np.nan, log_marginal))
    assert w[-1] == 0 and w.sum() == pytest.approx(1.0)
    assert laplace._allocate(np.array([0.5, 0.3, 0.2]), 7).tolist() == [4, 2, 1]


def test_grid_sweep_stops_where_the_weight_is_negligible_and_refines_the_peak():
    from stan_free_models import laplace_grid

    grid = np.linspace(-4.0, 4.0, 9)
    calls: list[tuple[float, float | None]] = []

    def peaked(x: float, near: float | None) -> float:
        calls.append((x, near))
        return -0.5 * ((x - 1.1) / 0.3) ** 2  # a narrow peak at 1.1

    values = laplace_grid.sweep_grid(grid, 0.2, peaked, refine_rounds=2)
    # from the point nearest the start, outwards, each from its neighbour
    assert calls[:4] == [(0.0, None), (-1.0, 0.0), (1.0, 0.0), (2.0, 1.0)]
    # each side stopped at its first point 7 below the best (-1: -24.5; 3: -20.1), not at the ends
    assert min(values) == -1.0 and max(values) == 3.0
    # the peak holds most of the weight: two halvings around it, each from the heaviest point
    assert calls[-4:] == [(0.5, 1.0), (1.5, 1.0), (0.75, 1.0), (1.25, 1.0)]
    xs = np.array(sorted(values))
    lv = np.array([values[x] for x in xs])
    # the mass of a Gaussian peak: sqrt(2 pi) x 0.3, to the midpoint rule's accuracy
    assert laplace_grid.log_mass(xs, lv) == pytest.approx(np.log(np.sqrt(2 * np.pi) * 0.3), abs=0.1)

    # a point not to be used (-inf) neither stops the sweep nor draws the refinement
    calls.clear()

    def unusable_start(x: float, near: float | None) -> float:
        calls.append((x, near))
        return -np.inf if x == 0.0 else -0.5 * ((x + 2.0) / 1.5) ** 2

    values = laplace_grid.sweep_grid(grid, 0.0, unusable_start, refine_rounds=2)
    assert {1.0, -1.0, -2.0, -3.0} <= set(values)
    assert values[0.0] == -np.inf and all(abs(x) > 0.1 for x, _ in calls[1:])
    assert laplace_grid.log_mass(np.array([0.0, 1.0]), np.array([-np.inf, -np.inf])) == -np.inf
    everywhere = laplace_grid.sweep_grid(grid, 0.0, lambda x, near: -np.inf, refine_rounds=2)
    assert sorted(everywhere) == grid.tolist()  # swept whole, no refinement


def test_laplace_integrates_tau_when_cells_have_one_judgment():
    """One judgment per cell: tau is not identified, and the grid keeps its prior's width.

    The joint mode puts tau near 0.1 there (it trades off with every prompt's
    discrimination), which made the fast path's intervals of the net preference too
    narrow; NUTS's tau on such data sits near 1 (docs/statistics.md).
    """
    rng = np.random.default_rng(5)
    truth = draw_truth(rng, 6, 60, 3)
    comp, item = np.meshgrid(np.arange(6), np.arange(60), indexing="ij")
    comp, item = comp.ravel(), item.ravel()
    y = simulate_net_ratings(rng, truth).y  # one 3-category response per cell
    data = GRMData(
        comparison=comp,
        item=item,
        y=y,
        weight=np.ones(len(y)),
        num_comparisons=6,
        num_items=60,
        num_categories=3,
        cell=np.arange(len(y)),
        num_cells=len(y),
    )
    # the grid over tau is what is checked: no refinement sweeps, no exact prompt draws
    post = fit_laplace(data, rng_key=KEY, num_draws=400, refine_sweeps=0, exact_items=False)
    comps = post.info["components"]
    assert sum(c["weight"] for c in comps) == pytest.approx(1.0)
    assert sum(c["stop"] - c["start"] for c in comps) == 400
    tau = post.flat("tau")
    for c in comps:
        assert np.all(tau[c["start"] : c["stop"]] == pytest.approx(c["tau"]))
    assert np.median(tau) > 0.3
    assert post.diagnostics.converged
    assert np.corrcoef(post.mean("theta"), truth.theta)[0, 1] > 0.8


def _unobserved(num_categories: int, **systems) -> GRMData:
    """One comparison, three prompts and no observation that counts (weight 0): the
    potential is the priors'."""
    return GRMData(
        comparison=np.zeros(1, np.int64),
        item=np.zeros(1, np.int64),
        y=np.ones(1, np.int64),
        weight=np.zeros(1),
        num_comparisons=1,
        num_items=3,
        num_categories=num_categories,
        **systems,
    )


@pytest.mark.parametrize("symmetric", [False, True])
def test_item_prior_matches_the_models_potential(symmetric):
    """The prior SIR weights with is the model's: differences of NumPyro's potential."""
    import jax.numpy as jnp

    from stan_free_models.conditional import item_log_prior

    padded = pad_data(_unobserved(num_categories=5))
    static = inference._static_key(padded, Priors(symmetric=symmetric))
    potential = inference._potential_fn(static)
    args = inference._dynamic_args(padded)
    rng = np.random.default_rng(0)
    size = 3 if symmetric else 5
    items = [rng.normal(0, 0.7, (padded.num_items, size)).astype(np.float32) for _ in range(2)]
    g = jnp.zeros(padded.num_comparisons)
    u = [float(potential(inference._split_params(static, g, jnp.asarray(i)), *args)) for i in items]
    priors = Priors(symmetric=symmetric)
    lp = [float(item_log_prior(jnp.asarray(i), priors, 5)[0].sum()) for i in items]
    # float32 sums of padded prompts (thousands): their rounding, not a missing term
    assert lp[0] - lp[1] == pytest.approx(u[1] - u[0], rel=1e-6, abs=1e-3)


@pytest.mark.parametrize("per_system", [False, True])
def test_theta_prior_scale_is_the_models_potential(per_system):
    """theta_scale changes the potential by exactly the normal prior's log density."""
    import jax.numpy as jnp
    from scipy.stats import norm

    systems = dict(pair_a=np.zeros(1, np.int64), pair_b=np.ones(1, np.int64), num_systems=2)
    padded = pad_data(_unobserved(num_categories=3, **(systems if per_system else {})))
    args = inference._dynamic_args(padded)
    size = padded.num_systems if per_system else padded.num_comparisons
    g = jnp.asarray(np.random.default_rng(1).normal(0, 2, size), jnp.float32)
    items = jnp.zeros((padded.num_items, 3))

    def potential(scale):
        static = inference._static_key(padded, Priors(theta_scale=scale))
        u = inference._potential_fn(static)(inference._split_params(static, g, items), *args)
        return float(u)

    expected = norm.logpdf(np.asarray(g), 0, 3).sum() - norm.logpdf(np.asarray(g), 0, 1).sum()
    assert potential(1.0) - potential(3.0) == pytest.approx(expected, rel=1e-4)


def test_exact_item_draws_undo_a_misplaced_proposal():
    """SIR from a proposal centred off the target lands on the target's mean."""
    import jax

    from stan_free_models.conditional import resample_items

    # prompts without judgments: their conditional is the prior, log alpha ~ N(0, 1); the
    # proposal has the thresholds roughly right and log alpha centred at 1
    draws, num_items = 400, 8
    mean = np.zeros((draws, num_items, 3))
    mean[..., 0] = 1.0
    mean[..., 1] = -1.0  # b1, then log(b2 - b1)
    mean[..., 2] = 0.7
    chol = np.broadcast_to(np.diag([0.8, 1.2, 0.5]), (draws, num_items, 3, 3))
    items, ess = resample_items(
        jax.random.PRNGKey(0),
        np.zeros((draws, 8)),
        np.zeros(draws),
        mean,
        chol,
        np.zeros(8, np.int64),
        np.zeros(8, np.int64),
        np.zeros((8, 3)),
        priors=Priors(),
        num_categories=3,
        num_candidates=64,
    )
    log_alpha = items[..., 0].ravel()
    assert abs(log_alpha.mean()) < 0.2  # the proposal's mean was 1
    assert 0.8 < log_alpha.std() < 1.2
    assert np.all((ess >= 1) & (ess <= 64))


def _exact_posterior_draws(
    rng, counts, cell_comp, cell_item, num_comp, num_items, size, theta_scale=1.0
):
    """Draws from the exact posterior of a tiny model by importance resampling from the prior,
    in the constrained parameters (no transform of ours): theta ~ N(0, theta_scale),
    log alpha ~ N(0, 1), a prompt's two thresholds an ordered pair of N(0, 2) draws (3
    categories)."""
    from scipy.special import expit

    n = 1_000_000 * max(1, round(theta_scale))  # a wider prior wastes more of its draws
    theta = rng.normal(0, theta_scale, (n, num_comp))
    log_alpha = rng.normal(0, 1, (n, num_items))
    b = np.sort(rng.normal(0, 2, (n, num_items, 2)), axis=-1)
    eta = np.exp(log_alpha[:, cell_item])[..., None] * (
        theta[:, cell_comp][..., None] - b[:, cell_item]
    )
    above = expit(eta)  # P(y >= 1), P(y >= 2) per cell
    probs = np.stack([1 - above[..., 0], above[..., 0] - above[..., 1], above[..., 1]], axis=-1)
    log_w = np.sum(counts * np.log(np.clip(probs, 1e-300, None)), axis=(-1, -2))
    w = np.exp(log_w - log_w.max())
    w /= w.sum()
    pick = rng.choice(n, size=size, p=w)
    moments = {
        "theta": (w @ theta, np.sqrt(w @ theta**2 - (w @ theta) ** 2)),
        "log_alpha": (w @ log_alpha, np.sqrt(w @ log_alpha**2 - (w @ log_alpha) ** 2)),
        "b1": (w @ b[..., 0], np.sqrt(w @ b[..., 0] ** 2 - (w @ b[..., 0]) ** 2)),
    }
    return theta[pick], log_alpha[pick], b[pick], moments, 1 / np.sum(w**2)


@pytest.mark.parametrize("theta_scale", [1.0, 3.0])
def test_refinement_sweeps_keep_the_exact_posterior_and_ignore_a_misplaced_proposal(theta_scale):
    """Gibbs sweeps started at exact posterior draws leave their distribution unchanged.

    Two comparisons, three prompts, a few judgments per cell and no cell effect: the exact
    posterior comes from importance resampling of prior draws (constrained parameters, not
    this package's transforms). The sweeps' proposals for the items are centred off on
    purpose; a kernel that is not exact for its conditional drifts towards them. With
    theta's prior N(0, 3), sweeps that kept N(0, 1) would pull theta in.
    """
    import jax

    from stan_free_models.conditional import refine_draws

    rng = np.random.default_rng(3)
    cell_comp = np.array([0, 0, 0, 1, 1, 1])
    cell_item = np.array([0, 1, 2, 0, 1, 2])
    counts = np.array([[0, 1, 1], [1, 0, 0], [0, 0, 2], [2, 0, 0], [0, 0, 1], [0, 1, 0]], float)
    draws = 3000
    theta, log_alpha, b, moments, ess = _exact_posterior_draws(
        rng, counts, cell_comp, cell_item, 2, 3, draws, theta_scale
    )
    assert ess > 3 * draws  # the reference itself is precise
    items = np.stack([log_alpha, b[..., 0], np.log(b[..., 1] - b[..., 0])], axis=-1)
    out_theta, out_items, info = refine_draws(
        jax.random.PRNGKey(0),
        theta,
        items,
        np.zeros(draws),
        np.zeros(draws, np.int64),
        cell_comp,
        cell_item,
        counts,
        gain=np.zeros((1, 3, 3, 2)),
        theta_mode=np.zeros((1, 2)),
        items_mode=np.broadcast_to(np.array([1.0, 1.0, 0.5]), (1, 3, 3)).copy(),
        item_chol=np.broadcast_to(0.6 * np.eye(3), (1, 3, 3, 3)).copy(),
        theta_step=np.full((1, 2), 1.5),
        priors=Priors(theta_scale=theta_scale),
        num_categories=3,
        sweeps=6,
    )
    assert np.all(info["accept"] > 0.1) and np.all(info["moved"] > 0.05)  # the sweeps moved
    after = {"theta": out_theta, "log_alpha": out_items[..., 0], "b1": out_items[..., 1]}
    for name, values in after.items():
        mean, sd = moments[name]
        # 3000 draws: the means' standard error is sd / 55; the draws after the sweeps
        # are correlated with the start, so allow 5 of them
        np.testing.assert_array_less(np.abs(values.mean(0) - mean), 5 * sd / np.sqrt(draws))
        np.testing.assert_allclose(values.std(0), sd, rtol=0.1)


@pytest.mark.parametrize("lapse", [None, 0.2])
def test_the_item_marginal_correction_matches_a_brute_force_integral(lapse):
    """log I_j - log I_j^Laplace for one prompt (log alpha and the log half-width of
    symmetric thresholds), against the integral on a dense grid of its two parameters."""
    import jax
    import jax.numpy as jnp

    from stan_free_models.conditional import item_log_marginal_correction, item_log_prior
    from stan_free_models.graded_response import cell_counts_log_lik

    theta = np.array([0.8, -0.4])
    counts = np.array([[1.0, 2.0, 4.0], [3.0, 1.0, 1.0]], np.float32)  # two cells, one prompt
    cell_comp, cell_item = np.array([0, 1]), np.array([0, 0])
    tau = 0.6
    lapse_j = None if lapse is None else jnp.float32(lapse)

    @jax.jit  # one program per grid size (op by op, it was hundreds of small ones)
    def traced_log_joint(items):
        lp, alpha, b = item_log_prior(items, Priors(symmetric=True), 3)

        def one(a, bb):
            return cell_counts_log_lik(
                jnp.asarray(theta, jnp.float32)[cell_comp],
                jnp.broadcast_to(a, (2,)),
                jnp.broadcast_to(bb, (2, 2)),
                tau,
                jnp.asarray(counts),
                lapse=lapse_j,
            ).sum()

        return lp + jax.vmap(one)(alpha, b)

    def log_joint(items):  # (N, 2) -> (N,)
        return np.asarray(traced_log_joint(jnp.asarray(items, jnp.float32)), np.float64)

    la, raw = np.meshgrid(np.linspace(-6, 6, 481), np.linspace(-6, 4, 401), indexing="ij")
    grid = np.stack([la.ravel(), raw.ravel()], axis=1)
    vals = log_joint(grid)
    cell_area = (12 / 480) * (10 / 400)
    log_exact = np.logaddexp.reduce(vals) + np.log(cell_area)
    # any Gaussian near the posterior: the correction is relative to its "Laplace" value
    mode = grid[np.argmax(vals)]
    chol = np.diag([0.6, 0.5])
    log_gauss = log_joint(mode[None])[0] + np.log(2 * np.pi) + np.log(0.6 * 0.5)
    got = item_log_marginal_correction(
        jax.random.PRNGKey(0),
        theta,
        tau,
        lapse,
        mode[None],
        chol[None],
        cell_comp,
        cell_item,
        counts,
        priors=Priors(symmetric=True),
        num_categories=3,
        num_candidates=20_000,
    )
    assert got.shape == (1,)
    assert got[0] == pytest.approx(log_exact - log_gauss, abs=0.02)
