"""Benchmarks of kubeopera-tenants against the raw cost of helm itself; ``python -m bench``."""
