"""Which checks exist: the built-in table, the generated index, entry points and plugins.
"""
