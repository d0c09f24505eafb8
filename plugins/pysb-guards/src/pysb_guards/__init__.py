"""placeholder until the provider lands."""
