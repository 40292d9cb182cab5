"""Search orchestration, the CLI, and (later) the store, budgets and export."""
