"""jitorch.optim (being built: see issue 3)."""
