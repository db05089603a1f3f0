"""jitorch.utils (being built: see issue 3)."""
