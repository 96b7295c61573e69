"""What runs on the pod: engine adapters, checkpoint handling, and the stdlib-only on-pod runner."""
