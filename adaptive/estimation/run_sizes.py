"""NUTS's run sizes, one definition for every door: the command line, ``import evalset`` and the
service's scheduled refits (:func:`adaptive.estimation.fitting.preset_config` applies them to every NUTS
fit whose sizes the user did not choose).

A short warm-up (the whitened sampler starts at the fast fit's mode with its Hessian as the
metric), then blocks of draws per chain until every parameter has this bulk and tail ESS
(paper size: about 80 s). No JAX here: the command line reads these to write its help.
"""

from __future__ import annotations

NUTS_WARMUP = 300
NUTS_DRAWS = 250
NUTS_MIN_ESS = 400.0
