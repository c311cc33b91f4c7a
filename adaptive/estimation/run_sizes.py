"""NUTS's run sizes in every door (the command line, ``import evalset`` and the service's
scheduled refits), by name: :data:`stan_free_models.fit_settings.DOOR_NUTS` is their one
definition (:func:`adaptive.estimation.fitting.preset_config` applies it to every NUTS fit
whose sizes the user did not choose). No JAX here: the command line reads these to write
its help.
"""

from __future__ import annotations

from stan_free_models.fit_settings import DOOR_NUTS

NUTS_WARMUP = DOOR_NUTS.num_warmup
NUTS_DRAWS = DOOR_NUTS.num_samples
NUTS_MIN_ESS = DOOR_NUTS.min_ess
