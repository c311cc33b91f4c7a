"""A door's decision-rule options: their problems, one per field, for the door's own message
(:mod:`adaptive.stopping.rule_options`; the rule itself is ``RuleKeywords(...).build_rule()``)."""

from __future__ import annotations

from adaptive.stopping.rule_options import rule_problems as rule_problems

__all__ = ["rule_problems"]
