"""Errors the CLI turns into one clear line and a non-zero exit code."""

from __future__ import annotations


class TailpodError(Exception):
    """A failure the user can act on. `hint` says how to fix it; never put a secret in either."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message} ({self.hint})"


class ConfigError(TailpodError):
    """Bad usage: settings, a malformed .env, an unknown provider or engine, a run tag the ledger
    does not know, or nothing to act on. Exit 2 (docs/exit-codes.md)."""

    exit_code = 2


class ProviderError(TailpodError):
    """A provider API refused or failed a call."""


class AuthError(ProviderError):
    """The API key was rejected (401/403)."""


class CapacityError(ProviderError):
    """No GPU of the requested kind is available right now."""


class TransientError(TailpodError):
    """A failure that passes by itself (a provider's rate limit, 5xx or time-out): nothing is
    wrong with the settings; the message says when to retry."""

    exit_code = 75  # EX_TEMPFAIL in BSD sysexits.h: "temporary failure, the user may retry"


class BillingNotProven(TailpodError):
    """`down` could not prove that billing stopped; the message names what still bills."""

    exit_code = 3


class Preempted(TailpodError):
    """A spot pod lost its bid mid-run: its provider stopped it and its disk still bills until
    `down`; the message says when, what bills and how the run resumes. Exit 3."""

    exit_code = 3


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, after tailpod settled what the interrupted step had started. `settled` says what
    became of it (a pod torn down and billing proven stopped), so the terminal says so at the
    moment a user is most anxious, not only billing-proof.json (newcomer 2.26). Exit 130."""

    def __init__(self, settled: str) -> None:
        super().__init__(settled)
        self.settled = settled
