"""The former path of :mod:`services.runtime.background`: the same module under its old name
(an alias, not a copy, so what is set on one is seen by the other)."""

import sys

from services.runtime import background

sys.modules[__name__] = background
