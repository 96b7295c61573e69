"""The error a failed engine start raises, with the tail of the engine's log.
"""

from __future__ import annotations


class EngineStartError(RuntimeError):
    """The engine exited or never became healthy; `tail` holds the last lines of its log."""

    def __init__(self, message: str, tail: list[str]) -> None:
        super().__init__(message)
        self.tail = tail


class EngineStopError(EngineStartError):
    """The recorded engine's process group or port outlived SIGTERM and SIGKILL."""
