"""OpInfo conformance suite (a package so its conftest does not shadow tests/python/conftest.py)."""
