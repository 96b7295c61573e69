"""tailpod: rent GPU pods for LLM-serving experiments, measure honestly, prove billing stopped."""

__version__ = "0.1.0"
