"""What a user hands in, read within bounds: request files, recordings, prompt text, SLOs.
"""
