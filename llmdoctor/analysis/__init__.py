"""Pure functions of measurements: the waterfall, server clocks, costs, noise, failures, regressions.

Shared by checks, the diagnosis and the report. Nothing here sends a request or imports a probe.
"""
