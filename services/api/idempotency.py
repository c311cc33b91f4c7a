"""Idempotent writes: a key names one request, and the same key again gets the first answer.

Both writes that take a key (``POST .../judgments`` by its ``Idempotency-Key`` header,
``POST .../next-batch`` by its body's ``idempotency_key`` or that header) go through
:func:`idempotent`: the key checked as any id is, the request's content fingerprinted, and
a stored answer replayed only for the same fingerprint (a 422 ``idempotency_key_reused``
for another request under the key).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, NamedTuple

from services.api.errors import ApiError
from services.store.validation import id_problem


class Idempotent(NamedTuple):
    """A write's key (None: none given) and the fingerprint of its request."""

    key: str | None
    fingerprint: str
    field: str

    def check(self, stored_fingerprint: str | None, message: str) -> None:
        """Refuse a replay of the key for another request (``stored_fingerprint`` None: a
        request stored before fingerprints were, taken as the same)."""
        if stored_fingerprint is not None and stored_fingerprint != self.fingerprint:
            raise ApiError(
                422, "idempotency_key_reused", message, [{"field": self.field, "message": message}]
            )


def idempotent(key: str | None, content: Any, *, field: str, name: str) -> Idempotent:
    """The key of a write (checked as an id: a 422 naming ``field`` otherwise) and the
    fingerprint of its request's ``content`` (JSON, keys sorted).

    Example:
        >>> once = idempotent("k1", {"b": 1, "a": [2]}, field="Idempotency-Key", name="key")
        >>> once.key, once.fingerprint == idempotent(None, {"a": [2], "b": 1}, field="", name="").fingerprint
        ('k1', True)
    """
    if key is not None and (problem := id_problem(key)) is not None:
        raise ApiError(
            422,
            "validation_error",
            f"invalid {name}: {problem}",
            [{"field": field, "message": problem}],
        )
    fingerprint = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()
    return Idempotent(key, fingerprint, field)
