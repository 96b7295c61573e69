"""Provider adapters (local, runpod, vastai), the tailnet, SSH and the sandbox cloud."""
