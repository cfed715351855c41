"""The measurement data types: what the probes measured, as plain data.

The bottom floor of the house: checks, analysis, the report and the renderers read these
types, and this package imports nothing above it (``tests/test_architecture.py``).
"""
