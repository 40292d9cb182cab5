"""The search service: the CLI, budgets, the Optuna and Ray Tune adapters, predictions at the target, the store
and export."""
