"""The server's own log: read it, clean it, match it against the rules, and sum it up.
"""
