"""Which prompts to keep: redundancy, model tiers, composable selection steps, leave-one-comparison-out evaluation, per-tier pruning, and the one Ray module that fans folds out."""
