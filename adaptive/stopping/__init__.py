"""When a comparison is decided: the decision rule, anytime-valid evidence, the judgments still needed, decisions and their rows."""
