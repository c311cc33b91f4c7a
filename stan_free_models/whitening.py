"""Whitening factors of the potential's Hessian at the mode, for NUTS.

:func:`whitening` is the dense reference (an eigendecomposition); :class:`Arrowhead`
is what :mod:`stan_free_models.whitened_nuts` samples with: prompts interact only
through the global parameters, so with the prompts' coordinates first and the
globals last the Hessian is an arrowhead ``[[A, B], [B^T, C]]`` (``A`` block
diagonal, one small block per prompt); its block Cholesky factor ``R`` keeps that
pattern and ``L = R^{-T}`` is applied as one small matrix per prompt plus a
prompts-by-globals and a globals-by-globals product.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

#: smallest eigenvalue kept of the (scaled) Hessian: a flat or concave direction at the
#: mode gets this curvature, so its mass is bounded and the sampler stays stable
MIN_CURVATURE = 1e-2


def whitening(hess: np.ndarray) -> np.ndarray:
    """Dense L with L L^T = inverse Hessian, eigenvalues floored at ``MIN_CURVATURE``.

    The reference for :class:`Arrowhead`, which the sampler uses.
    """
    values, vectors = np.linalg.eigh(hess)
    values = np.maximum(values, MIN_CURVATURE)
    return vectors / np.sqrt(values)  # columns scaled: L L^T = V diag(1/w) V^T


def _floored(sym: np.ndarray) -> np.ndarray:
    """Symmetric matrices (..., n, n) with eigenvalues floored at ``MIN_CURVATURE``."""
    values, vectors = np.linalg.eigh(sym)
    return (vectors * np.maximum(values, MIN_CURVATURE)[..., None, :]) @ np.swapaxes(
        vectors, -1, -2
    )


class Arrowhead:
    """``L = R^{-T}`` for the block Cholesky factor ``R`` of an arrowhead Hessian.

    ``colours`` and ``items``: every flat coordinate's role and prompt (-1: global), as
    :func:`stan_free_models.whitened_nuts.colouring` gives them.

    Coordinates of ``w``: every prompt's ``m`` coordinates (prompt by prompt), then
    the ``G`` global ones. ``apply(w)`` gives ``L w`` in the model's flat layout:
    ``z_g = M w_g`` and, for prompt p, ``z_p = T_p w_p + F_p w_g``.
    """

    def __init__(self, hess: np.ndarray, colours: np.ndarray, items: np.ndarray):
        local = np.flatnonzero(items >= 0)
        order = local[np.lexsort((colours[local], items[local]))]
        num_items = int(items.max()) + 1
        self.item_index = order.reshape(num_items, -1)  # (P, m) flat coordinates
        self.global_index = np.flatnonzero(items < 0)  # (G,)
        idx, glob = self.item_index, self.global_index
        a = hess[idx[:, :, None], idx[:, None, :]]  # (P, m, m)
        b = hess[idx][:, :, glob]  # (P, m, G)
        # a prompt block that is not positive definite (a flat direction, a mode not
        # quite reached) gets floored curvature and no coupling to the globals, so its
        # variance in L L^T stays at most 1 / MIN_CURVATURE per direction
        flat = np.linalg.eigvalsh(a)[:, 0] < MIN_CURVATURE
        a = np.where(flat[:, None, None], _floored(a), a)
        b = np.where(flat[:, None, None], 0.0, b)
        c = hess[np.ix_(glob, glob)]
        chol_a = np.linalg.cholesky(a)
        k = np.linalg.solve(chol_a, b)  # L_A^{-1} B, (P, m, G)
        schur = _floored(c - np.einsum("pmg,pmh->gh", k, k))
        m_glob = np.linalg.inv(np.linalg.cholesky(schur)).T  # L_S^{-T}
        self.t = np.swapaxes(np.linalg.inv(chol_a), -1, -2)  # L_A^{-T}, (P, m, m)
        self.f = -self.t @ k @ m_glob  # (P, m, G)
        self.m = m_glob
        flat = np.concatenate([idx.ravel(), glob])
        self.gather = np.argsort(flat)  # structured vector -> flat layout

    @property
    def size(self) -> int:
        return len(self.gather)

    def arrays(self) -> tuple[jax.Array, ...]:
        """The factors as float32 device arrays, the order :func:`apply_arrowhead` takes."""
        return (
            jnp.asarray(self.t, jnp.float32),
            jnp.asarray(self.f, jnp.float32),
            jnp.asarray(self.m, jnp.float32),
            jnp.asarray(self.gather, jnp.int32),
        )

    def apply(self, w: np.ndarray) -> np.ndarray:
        """``L w`` for whitened draws ``w`` (..., D), in float64."""
        num_items, m = self.item_index.shape
        w_items = w[..., : num_items * m].reshape(w.shape[:-1] + (num_items, m))
        w_glob = w[..., num_items * m :]
        z_items = np.einsum("pij,...pj->...pi", self.t, w_items) + np.einsum(
            "pig,...g->...pi", self.f, w_glob
        )
        z = np.concatenate(
            [z_items.reshape(w.shape[:-1] + (-1,)), np.einsum("gh,...h->...g", self.m, w_glob)],
            axis=-1,
        )
        return z[..., self.gather]

    def dense(self) -> np.ndarray:
        """The D x D matrix ``L`` (for checks)."""
        return self.apply(np.eye(self.size)).T


def apply_arrowhead(w, t, f, m_glob, gather):
    """:meth:`Arrowhead.apply` inside a traced model (one vector ``w``)."""
    num_items, m = t.shape[0], t.shape[1]
    w_items = w[: num_items * m].reshape(num_items, m)
    w_glob = w[num_items * m :]
    z_items = jnp.einsum("pij,pj->pi", t, w_items) + f @ w_glob
    return jnp.concatenate([z_items.ravel(), m_glob @ w_glob])[gather]


__all__ = ["MIN_CURVATURE", "Arrowhead", "apply_arrowhead", "whitening"]
