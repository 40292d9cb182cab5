"""The service under load: its overhead per trial, the store under many writers, a long soak."""
