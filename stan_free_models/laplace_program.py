"""The fast path's compiled program: MAP by L-BFGS, the Hessian by blocks and the Gaussian.

One jitted fit per compile key: the model's :class:`stan_free_models.model_key.ModelKey`
beside the part of :class:`stan_free_models.fit_settings.LaplaceSettings` a program
depends on (:meth:`~stan_free_models.fit_settings.LaplaceSettings.program`). The block
structure (a small global block of abilities, one K x K block per item) makes the Hessian
cheap: G + K Hessian-vector products and a Schur complement. The steps around it are
:func:`stan_free_models.laplace.fit_laplace`'s.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import optax.tree_utils as otu

from stan_free_models.conditional import THETA_STEP_SCALE
from stan_free_models.fit_settings import LaplaceSettings
from stan_free_models.grm_potential import grm_hessian_blocks
from stan_free_models.inference import TRACE_COUNTS, _potential_fn, _split_params, lbfgs_minimise
from stan_free_models.model_key import ModelKey

#: global directions whose Hessian-vector products run together (memory: this many copies
#: of the per-judgment intermediates instead of one per global parameter)
HVP_CHUNK = 16


def _compiled_laplace(
    static: ModelKey,
    settings: LaplaceSettings,
    fixed_tau: bool = False,
    with_gain: bool = False,
    with_cond_mean: bool = True,
):
    """The jitted MAP + Laplace fit of one model key and settings (compiled once per key:
    :meth:`LaplaceSettings.program`, the part of the settings a program depends on).
    ``with_cond_mean``: also return each draw's items' conditional mean (draws x items, as
    large as the item draws; only the exact item draws read it)."""
    return _compiled_program(
        static, settings.program(), bool(fixed_tau), bool(with_gain), bool(with_cond_mean)
    )


@functools.lru_cache(maxsize=32)
def _compiled_program(
    static: ModelKey,
    program: LaplaceSettings,
    fixed_tau: bool,
    with_gain: bool,
    with_cond_mean: bool = True,
):
    """MAP + Laplace; with ``fixed_tau`` the cell effect's log tau (with a lapse rate: logit
    lapse and log tau) is an argument, not fitted.

    ``with_gain`` also returns what :func:`stan_free_models.conditional.refine_draws`
    needs: how the items' conditional mean moves with the global block (P, K, G), and
    a random-walk step per global parameter from its conditional sd given the items.

    The fixed-tau fit also returns the Laplace estimate of log p(y, log tau) (or of
    log p(y, logit lapse, log tau)) (up to a
    constant): -U at the conditional mode - 0.5 log det of its Hessian. ``rng_key`` may be
    the draws' standard normals ``(z_g, z_i)`` instead (:mod:`stan_free_models.laplace_batch`).
    """
    potential = _potential_fn(static)
    max_iter, num_draws = program.max_iter, program.num_draws
    num_cat = static.num_categories
    num_item_params = 1 + ((num_cat - 1) // 2 if static.priors.symmetric else num_cat - 1)

    def objective(g, items, args, log_tau):
        if fixed_tau:
            # log tau, or (logit lapse, log tau) when judgments may lapse: the global
            # block's last entries
            g = jnp.concatenate([g, jnp.reshape(log_tau, (-1,)).astype(g.dtype)])
        return potential(_split_params(static, g, items), *args)

    def fit(rng_key, g0, items0, args, tol, log_tau):
        TRACE_COUNTS["laplace"] += 1  # runs at trace time only
        fun = lambda p: objective(p[0], p[1], args, log_tau)  # noqa: E731
        params, num_steps = lbfgs_minimise(fun, (g0, items0), max_iter=max_iter, tol=tol)
        g, items = params
        grad_norm = otu.tree_norm(jax.grad(fun)(params))
        grad_fn = jax.grad(objective, argnums=(0, 1))

        def hvp(vg, vi):
            return jax.jvp(lambda a, b: grad_fn(a, b, args, log_tau), (g, items), (vg, vi))[1]

        if static.num_cells is None:  # per-observation derivatives: one pass
            raw = grm_hessian_blocks(static, g, items, args)
        else:
            raw = _hvp_blocks(hvp, g, items, num_item_params)
        blocks = _hessian_blocks(*raw)
        out = _block_gaussian(rng_key, g, items, blocks, num_draws, with_cond_mean)
        if with_gain:
            out["item_gain"] = jnp.einsum("jkl,jlg->jkg", blocks["d_inv"], blocks["b_cross"])
            out["g_step"] = THETA_STEP_SCALE / jnp.sqrt(
                jnp.maximum(jnp.diagonal(blocks["h_gg"]), jnp.finfo(g.dtype).tiny)
            )
        return out | {
            "g": g,
            "items": items,
            "grad_norm": grad_norm,
            "num_steps": num_steps,
            "potential": fun(params),
            # Laplace's log marginal: -U(mode) - 0.5 log det H, H = blockdiag(D) with Schur S
            "log_marginal": -fun(params)
            - jnp.sum(jnp.log(jnp.diagonal(blocks["chol_s"])))
            - 0.5 * jnp.sum(jnp.linalg.slogdet(blocks["d_blocks"])[1]),
        }

    return jax.jit(fit)


def _hvp_blocks(hvp, g, items, num_item_params: int) -> tuple:
    """The Hessian at the mode by blocks from Hessian-vector products (traced; the model
    with cells): the global block (G, G), the cross terms (G, P, K), the items' (P, K, K)."""
    eye_g = jnp.eye(g.shape[0], dtype=g.dtype)
    # one Hessian-vector product per global direction, HVP_CHUNK at a time: a vmap of
    # all G at once holds G copies of every per-judgment intermediate (14 KB per
    # judgment with 200 systems), the chunks hold HVP_CHUNK; the numbers are the same
    h_gg, h_ig = jax.lax.map(lambda e: hvp(e, jnp.zeros_like(items)), eye_g, batch_size=HVP_CHUNK)
    # h_gg: (G, G); h_ig: (G, P, K) = d2U / (d g, d item)
    slot_dirs = jnp.broadcast_to(
        jnp.eye(num_item_params, dtype=g.dtype)[:, None, :], (num_item_params,) + items.shape
    )
    _, h_ii = jax.vmap(lambda v: hvp(jnp.zeros_like(g), v))(slot_dirs)
    # h_ii[k, j, l] = d2U / (d item_j,l d item_j,k): blocks (P, K, K)
    return h_gg, h_ig, jnp.transpose(h_ii, (1, 2, 0))


def _hessian_blocks(h_gg, h_ig, d_blocks) -> dict:
    """The Hessian's blocks (traced: the global block, the cross terms (G, P, K), the
    items' (P, K, K)) with each prompt's inverse and the Cholesky factor of the global
    block's Schur complement."""
    eye_g = jnp.eye(h_gg.shape[0], dtype=h_gg.dtype)
    d_blocks = 0.5 * (d_blocks + jnp.swapaxes(d_blocks, 1, 2))
    d_inv = jnp.linalg.inv(d_blocks)
    b_cross = jnp.transpose(h_ig, (1, 2, 0))  # (P, K, G)
    schur = h_gg - jnp.einsum("jkg,jkl,jlh->gh", b_cross, d_inv, b_cross)
    schur = 0.5 * (schur + schur.T)
    chol_s = jnp.linalg.cholesky(schur)
    return {
        "h_gg": h_gg,
        "d_blocks": d_blocks,
        "d_inv": d_inv,
        "b_cross": b_cross,
        "chol_s": chol_s,
        "cov_g": jax.scipy.linalg.cho_solve((chol_s, True), eye_g),
    }


#: the most draws of the items computed at once (a divisor of the draws)
DRAW_BLOCK = 250


def _block_gaussian(
    rng_key, g, items, blocks: dict, num_draws: int, with_cond_mean: bool = True
) -> dict:
    """Draws from the Gaussian at the mode (traced): the global block from its Schur
    complement, each prompt's parameters from their conditional given it; and the
    marginal covariances (exact block inverse)."""
    d_inv, b_cross, chol_s, cov_g = (
        blocks["d_inv"],
        blocks["b_cross"],
        blocks["chol_s"],
        blocks["cov_g"],
    )
    if isinstance(rng_key, tuple):
        z_g, z_i = rng_key
    else:
        key_g, key_i = jax.random.split(rng_key)
        z_g = jax.random.normal(key_g, (num_draws, g.shape[0]), dtype=g.dtype)
        z_i = jax.random.normal(key_i, (num_draws,) + items.shape, dtype=g.dtype)
    g_draws = g + jax.scipy.linalg.solve_triangular(chol_s.T, z_g.T, lower=False).T
    chol_d = jnp.linalg.cholesky(d_inv)

    def item_block(xs):
        # items | global: N(mu_i - D^-1 B (g - mu_g), D^-1)
        gd, zi = xs
        mean = items - jnp.einsum("jkl,jlg,ng->njk", d_inv, b_cross, gd - g)
        draws = mean + jnp.einsum("jkl,njl->njk", chol_d, zi)
        return (mean, draws) if with_cond_mean else (draws,)

    # a block of draws at a time: the intermediates of one block, not of every draw (the
    # draws of the items are the fit's largest arrays: draws x prompts x parameters)
    block = max(b for b in range(1, min(num_draws, DRAW_BLOCK) + 1) if num_draws % b == 0)
    parts = jax.lax.map(
        item_block,
        (
            g_draws.reshape(num_draws // block, block, -1),
            z_i.reshape((num_draws // block, block) + items.shape),
        ),
    )
    parts = [x.reshape((num_draws,) + items.shape) for x in parts]
    out = {"item_cond_mean": parts[0]} if with_cond_mean else {}
    return out | {
        "g_draws": g_draws,
        "item_draws": parts[-1],
        "item_chol": chol_d,
        "cov_g": cov_g,
        # marginal sd of each item block
        "item_cov": d_inv
        + jnp.einsum("jkl,jlg,gh,jmh,jmn->jkn", d_inv, b_cross, cov_g, b_cross, d_inv),
        "finite": jnp.all(jnp.isfinite(chol_s)) & jnp.all(jnp.isfinite(chol_d)),
    }
