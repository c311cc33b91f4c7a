"""A door's decision-rule options: the parameter model an HTTP query or body is made of, and
their problems, one per field, for the door's own message (:mod:`adaptive.stopping.rule_options`;
the rule itself is ``RuleKeywords(...).build_rule()``)."""

from __future__ import annotations

from adaptive.stopping.rule_options import rule_options_model as rule_options_model
from adaptive.stopping.rule_options import rule_problems as rule_problems

__all__ = ["rule_options_model", "rule_problems"]
