"""An OpenAI-compatible simulator with a latency model and fault profiles (demo and tests)."""
