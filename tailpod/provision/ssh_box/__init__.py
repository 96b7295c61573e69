"""Provider `ssh`: your own machine over SSH (nothing is rented)."""

from tailpod.provision.ssh_box.provider import BoxAddress, SshBoxProvider

__all__ = ["BoxAddress", "SshBoxProvider"]
