"""Integration tests against a real inference server (llama.cpp via llama-cpp-python)."""
