"""SSH failures, each reported as one line the user can act on (never with a secret in it)."""

from __future__ import annotations

from tailpod.errors import TailpodError


class SshError(TailpodError):
    """Something went wrong talking to a pod over SSH."""


class SshUnreachable(SshError):
    """Nothing answered SSH at the address within the wait."""


class SshAuthRefused(SshError):
    """The pod's sshd refused the user's key."""


class HostKeyChanged(SshError):
    """The pod offered a host key that differs from the one pinned for its name."""
