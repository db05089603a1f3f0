"""jitorch.utils.data (being built: see issue 3)."""
