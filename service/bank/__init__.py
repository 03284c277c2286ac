"""Experience bank: shared across sessions by name; consolidated in batches by an evolver."""
