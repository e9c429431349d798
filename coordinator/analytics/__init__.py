"""Analytics (placeholder docstring; rewritten below)."""
