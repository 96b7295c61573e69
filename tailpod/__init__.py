"""tailpod: rent a GPU pod for LLM-serving experiments, measure it honestly, and prove billing stopped."""

__version__ = "0.1.0"
