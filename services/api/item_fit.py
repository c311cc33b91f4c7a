"""The former path of :mod:`services.api.routes.item_fit`: the same module under its old name
(an alias, not a copy, so what is set on one is seen by the other)."""

import sys

from services.api.routes import item_fit

sys.modules[__name__] = item_fit
