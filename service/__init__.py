"""EvoHarness: serve a trained harness policy behind a REST step API."""

__version__ = "0.1.0"
