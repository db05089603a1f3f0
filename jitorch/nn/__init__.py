"""jitorch.nn (being built: see issue 3)."""
