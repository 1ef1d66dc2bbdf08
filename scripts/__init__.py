"""Maintenance scripts (`python -m scripts.<name>`); not imported by the experiments."""
