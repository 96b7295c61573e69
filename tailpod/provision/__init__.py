"""The laptop's side of renting: provider adapters (runpod, vastai, local), the tailnet and SSH,
and the money-safe create, teardown (with its billing proof) and reconcile over them."""
