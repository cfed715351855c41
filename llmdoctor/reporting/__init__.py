"""From findings to a report: folding and ranking, the breakdown, and delivering the metrics.
"""
