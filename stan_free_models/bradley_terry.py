"""Bayesian Bradley-Terry with a position ("home-field") intercept and Davidson ties.

Tack & Piech (2022), equation (2): for item l and dimension k, the response
shown first (i) is preferred over the one shown second (j) with probability

    p_ijkl = sigmoid(alpha_0kl + alpha_ikl - alpha_jkl),

alpha ~ N(0, 1), alpha_0 > 0 meaning a pull towards the first position.

Here a *player* is whatever carries one ability (a (item, system) pair for the
per-item analysis, a system for the pooled leaderboard) and a *group* is
whatever carries one intercept (an item, the whole data set, an annotator).

Outcomes are coded ``y = 0`` second preferred, ``1`` tie, ``2`` first
preferred. Without a tie model ties must be resolved before fitting (the
paper's coin flip, done in :mod:`adaptive.leaderboards.bt`). With Davidson's (1970) tie
model, writing d = alpha_0 + alpha_i - alpha_j and nu > 0,

    P(first)  = e^{d/2} / (e^{d/2} + e^{-d/2} + nu)
    P(second) = e^{-d/2} / (e^{d/2} + e^{-d/2} + nu)
    P(tie)    = nu / (e^{d/2} + e^{-d/2} + nu),

which is Bradley-Terry when nu -> 0 and keeps P(first | d) = P(second | -d).
Everything is computed in log space (log-sum-exp), stable at any d.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints
from numpyro.distributions.util import validate_sample

#: outcome codes
SECOND, TIE, FIRST = 0, 1, 2
TIE_MODELS = ("none", "davidson")
#: prior of log nu (Davidson): centred on nu = e^-1, a tie share of ~15% between equals
LOG_NU_PRIOR = (-1.0, 1.0)


def outcome_log_probs(delta: jax.Array, log_nu: jax.Array | None = None) -> jax.Array:
    """(..., 3) log P(second), log P(tie), log P(first) for logits ``delta``.

    Args:
        delta: alpha_0 + alpha_first - alpha_second.
        log_nu: Davidson's log tie parameter, or None for plain Bradley-Terry
            (then P(tie) = 0, log P(tie) = -inf).

    Example:
        >>> import numpy as np
        >>> np.round(np.exp(outcome_log_probs(jnp.array(0.0))), 3).tolist()
        [0.5, 0.0, 0.5]
    """
    delta = jnp.asarray(delta)
    if log_nu is None:
        return jnp.stack(
            [
                jax.nn.log_sigmoid(-delta),
                jnp.full_like(delta, -jnp.inf),
                jax.nn.log_sigmoid(delta),
            ],
            axis=-1,
        )
    half = 0.5 * delta
    log_nu = jnp.broadcast_to(log_nu, half.shape)
    norm = jax.nn.logsumexp(jnp.stack([half, -half, log_nu], axis=-1), axis=-1)
    return jnp.stack([-half - norm, log_nu - norm, half - norm], axis=-1)


class PairedOutcome(dist.Distribution):
    """Outcome of one paired comparison: 0 second preferred, 1 tie, 2 first preferred."""

    arg_constraints = {"delta": constraints.real}
    support = constraints.integer_interval(0, 2)
    pytree_data_fields = ("delta", "log_nu")

    def __init__(
        self,
        delta: jax.Array,
        log_nu: jax.Array | None = None,
        *,
        validate_args: bool | None = None,
    ):
        self.delta = jnp.asarray(delta)
        self.log_nu = log_nu
        super().__init__(batch_shape=jnp.shape(self.delta), validate_args=validate_args)

    def sample(self, key, sample_shape=()):
        logits = outcome_log_probs(self.delta, self.log_nu)
        shape = sample_shape + self.batch_shape
        return jax.random.categorical(key, logits, shape=shape).astype(jnp.int32)

    @validate_sample
    def log_prob(self, value):
        logp = outcome_log_probs(self.delta, self.log_nu)
        value = jnp.asarray(value, dtype=jnp.int32)
        logp = jnp.broadcast_to(logp, jnp.shape(value) + (3,))
        return jnp.take_along_axis(logp, value[..., None], axis=-1)[..., 0]

    @property
    def probs(self) -> jax.Array:
        return jnp.exp(outcome_log_probs(self.delta, self.log_nu))


def log_likelihood(
    ability: jax.Array,
    intercept: jax.Array | None,
    log_nu: jax.Array | None,
    first: jax.Array,
    second: jax.Array,
    group: jax.Array,
    y: jax.Array,
    weight: jax.Array,
) -> jax.Array:
    """Weighted log-likelihood of the outcomes (no priors): the MLE's objective."""
    delta = ability[first] - ability[second]
    if intercept is not None:
        delta = delta + intercept[group]
    logp = outcome_log_probs(delta, log_nu)
    picked = jnp.take_along_axis(logp, y[:, None].astype(jnp.int32), axis=-1)[:, 0]
    # a zero weight (padding) must not turn -inf into nan
    return jnp.sum(jnp.where(weight > 0, weight * picked, 0.0))


def bradley_terry(
    first: jax.Array,
    second: jax.Array,
    num_players: int,
    *,
    group: jax.Array | None = None,
    num_groups: int = 1,
    y: jax.Array | None = None,
    weight: jax.Array | None = None,
    position: bool = True,
    tie_model: str = "none",
    prior_scale: float = 1.0,
    intercept_scale: float = 1.0,
) -> None:
    """Bradley-Terry with a position intercept per group, as a NumPyro model.

    Args:
        first, second: (N,) player shown first / second in each comparison.
        num_players: number of abilities.
        group: (N,) intercept group of each comparison (default: one group).
        num_groups: number of intercepts.
        y: (N,) outcomes (0 second, 1 tie, 2 first), None to simulate.
        weight: (N,) likelihood weights; 0 removes an observation (padding).
        position: estimate the position intercept alpha_0 (else alpha_0 = 0).
        tie_model: ``"none"`` (ties must not occur) or ``"davidson"``.
        prior_scale, intercept_scale: sd of the normal priors (1 in the paper).

    References:
        Tack & Piech (2022), eq. (2); Davidson (1970), JASA 65:317-328.
    """
    if tie_model not in TIE_MODELS:
        raise ValueError(f"unknown tie model {tie_model!r}; expected one of {TIE_MODELS}")
    ability = numpyro.sample(
        "ability", dist.Normal(0.0, prior_scale).expand([num_players]).to_event(1)
    )
    delta = ability[first] - ability[second]
    if position:
        intercept = numpyro.sample(
            "intercept", dist.Normal(0.0, intercept_scale).expand([num_groups]).to_event(1)
        )
        g = jnp.zeros_like(first) if group is None else group
        delta = delta + intercept[g]
    log_nu = None
    if tie_model == "davidson":
        log_nu = numpyro.sample("log_nu", dist.Normal(*LOG_NU_PRIOR))
    with numpyro.plate("obs", first.shape[0]):
        if weight is None:
            numpyro.sample("y", PairedOutcome(delta, log_nu), obs=y)
        else:
            with (
                numpyro.handlers.mask(mask=weight > 0),
                numpyro.handlers.scale(scale=jnp.where(weight > 0, weight, 1.0)),
            ):
                numpyro.sample("y", PairedOutcome(delta, log_nu), obs=y)


__all__ = [
    "FIRST",
    "SECOND",
    "TIE",
    "TIE_MODELS",
    "PairedOutcome",
    "bradley_terry",
    "log_likelihood",
    "outcome_log_probs",
]
