"""The short lifecycle policy the sandbox tests tear down with: a sandbox pod disappears in well
under a second, so waits of seconds are enough and a broken teardown fails fast. Test-only, so it
lives here rather than on `LifecyclePolicy` (tailpod/provision/teardown.py), whose defaults are the
real clouds'."""

from __future__ import annotations

from tailpod.provision.teardown import LifecyclePolicy


def fast_policy() -> LifecyclePolicy:
    return LifecyclePolicy(terminate_attempts=3, terminate_retry_s=0.02, gone_timeout_s=1.2,
                           poll_interval_s=0.05, reterminate_every=4, sweep_timeout_s=1.2)
