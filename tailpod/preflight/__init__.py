"""`tailpod check-requirements`: everything that can fail, checked before anything bills.

One module per check family (envfile, cloud, model, fit, image, tailnet, ssh, tools); `runner`
runs them all at once. Only read-only calls are made: nothing is created at any provider, in the
tailnet or on the Hub.
"""

from tailpod.preflight.base import Check, Context, Outcome, Plan, Status
from tailpod.preflight.envfile import load_preflight_settings
from tailpod.preflight.runner import (
    CHECKS,
    CheckResult,
    PreflightReport,
    run_preflight,
)

__all__ = [
    "CHECKS",
    "Check",
    "CheckResult",
    "Context",
    "Outcome",
    "Plan",
    "PreflightReport",
    "Status",
    "load_preflight_settings",
    "run_preflight",
]
