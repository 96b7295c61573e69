"""Short API waits for tests against the sandbox clouds and in-memory transports: a sandbox answers
in milliseconds, so retries and read-backs of a fraction of a second are enough and a broken path
fails fast. Test-only, so they live here rather than on `ApiTimings`
(tailpod/provision/apiclient.py) or `FirstContactTimings` (tailpod/provision/runpod/first_contact.py),
whose defaults are the real clouds'."""

from __future__ import annotations

from tailpod.provision.apiclient import ApiTimings
from tailpod.provision.runpod.first_contact import FirstContactTimings


def fast_timings() -> ApiTimings:
    return ApiTimings(request_timeout_s=2.0, attempts=3, backoff_s=0.02, backoff_max_s=0.1,
                      max_retry_after_s=1.0, create_attempts=3, readback_attempts=10,
                      readback_interval_s=0.05, evidence_window_s=0.2)


def fast_first_contact_timings() -> FirstContactTimings:
    return FirstContactTimings(boot_s=20.0, hold_s=2.0, gone_s=10.0, poll_s=0.1)
