"""Measures on the pod: the probe, split along its layers (transport, stream, load, metrics, rows,
gate, logprobs); prompt classes ship as package data under prompts/."""
