"""A decision rule's parameters at a door, made from :class:`DecisionRule`'s fields.

Every door takes the same options: the HTTP query (``GET .../decisions``,
``.../hybrid-decisions``, the dashboard), a next batch's body, the command line's flags and
the Python keywords. Each is a pydantic model :func:`rule_options_model` makes from the
dataclass's fields, so a parameter's type, default, valid range and meaning are the
dataclass's (written once, in :mod:`adaptive.stopping.rule`); a door only chooses how its
``pairs`` are written. :meth:`RuleOptions.build_rule` builds the rule (registered ``pairs``
imply ``family="registered"``), and :func:`rule_problems` names each bad parameter.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic.fields import FieldInfo

from adaptive.stopping.rule import DEFAULT_FAMILY, MAX_PAIRS, DecisionRule

#: the rule's fields a door takes (the sign e-processes' prior is the rule's own)
RULE_OPTIONS = tuple(f.name for f in dataclasses.fields(DecisionRule) if f.name != "mixture")
#: each field's type, default, range and description, as pydantic reads the dataclass
RULE_FIELDS: dict[str, FieldInfo] = DecisionRule.__pydantic_fields__  # type: ignore[attr-defined]


class RuleOptions(BaseModel):
    """A door's rule parameters (the fields :func:`rule_options_model` adds)."""

    def build_rule(self) -> DecisionRule:
        """The :class:`DecisionRule` of these options (a ``ValidationError`` naming the field).

        Registered ``pairs`` imply the registered family when no other is asked for.
        """
        values = {k: v for k, v in self.model_dump().items() if k in RULE_OPTIONS}
        if values.get("pairs") and values.get("family") == DEFAULT_FAMILY:
            values["family"] = "registered"
        return DecisionRule(**values)


class _StrictRuleOptions(RuleOptions):
    model_config = ConfigDict(extra="forbid")


def rule_options_model(
    name: str, *, pairs: Any = None, forbid_extra: bool = False, doc: str = ""
) -> type[RuleOptions]:
    """A pydantic model of :data:`RULE_OPTIONS`, each typed and defaulted as the dataclass.

    Args:
        name: the model's name (the OpenAPI schema's).
        pairs: the type of ``pairs`` at this door (default: the dataclass's, which takes
            ``(a, b)`` pairs, ``"A:B"`` texts or one ``"A:B,C:D"`` text); the door's type
            takes the field's description and size limit, and defaults to None.
        forbid_extra: an unknown parameter is an error (keywords), rather than another
            parameter of the request (a query beside the rule's).
        doc: the model's docstring.
    """
    hints = get_type_hints(DecisionRule, include_extras=True)
    fields: dict[str, Any] = {
        f.name: (hints[f.name], f.default)
        for f in dataclasses.fields(DecisionRule)
        if f.name in RULE_OPTIONS
    }
    if pairs is not None:  # the door's form, with the field's meaning and size
        meaning = Field(description=RULE_FIELDS["pairs"].description)
        fields["pairs"] = (Annotated[pairs, meaning, Field(max_length=MAX_PAIRS)], None)
    base = _StrictRuleOptions if forbid_extra else RuleOptions
    return create_model(name, __base__=base, __doc__=doc or None, **fields)


#: the rule's options as Python keywords (an unknown keyword is an error)
RuleKeywords = rule_options_model("RuleKeywords", forbid_extra=True)


def rule_problems(exc: ValidationError) -> list[tuple[str, str]]:
    """(parameter, message) of each error, e.g. ``("alpha", "Input should be less than 1")``."""
    out = []
    for error in exc.errors():
        field = ".".join(str(part) for part in error["loc"]) or "rule"
        message = str(error["msg"]).removeprefix("Value error, ")
        own = error["type"] in ("value_error", "extra_forbidden")  # they name what they got
        if isinstance(error.get("input"), str | int | float) and not own:
            message += f" (got {error['input']!r})"
        out.append((field, message))
    return out


def rule_of(**options: Any) -> DecisionRule:
    """A :class:`DecisionRule` from keyword options (:data:`RULE_OPTIONS`); registered
    ``pairs`` imply that family. A bad option is a ``ValueError`` naming it, in one line.

    Example:
        >>> rule_of(alpha=0.1, pairs=["a:b"]).family
        'registered'
    """
    try:
        return RuleKeywords(**options).build_rule()
    except ValidationError as exc:
        problems = "; ".join(f"{field}: {message}" for field, message in rule_problems(exc))
        raise ValueError(problems) from None
