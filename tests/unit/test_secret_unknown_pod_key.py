"""A credential tailpod never learned (the pod-scoped key RunPod injects as RUNPOD_API_KEY,
vast's CONTAINER_API_KEY) is masked in the forms an engine or a container prints it, whatever
characters it holds (issue 38 item 4; adversary F5, #39): the key here has `_` and `-`, which
broke the old shape rule `rpa_[A-Za-z0-9]{20,}`. The ledger is where these lines are kept."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path

import pytest

from tailpod.ledger import Ledger, PodRecord
from tailpod.secrets import redact


def _pod_key() -> str:
    # Like the sandbox's pod keys (tailpod/sandbox/cloud.py issue_pod_key): token_urlsafe, so
    # `_` and `-`; both are forced in so the test never depends on the draw.
    return "rpa_pod_" + secrets.token_urlsafe(12) + "-x_" + secrets.token_urlsafe(6) + "Q9"


def _vast_key() -> str:
    return "vast_inst_" + secrets.token_urlsafe(10) + "_-" + secrets.token_hex(4)


FORMS = [
    "Authorization: Bearer {key}",  # a header as curl -v prints it
    "DEBUG 12-01 10:00:00 httpx headers={{'Authorization': 'Bearer {key}'}}",  # httpx debug
    '{{"headers": {{"authorization": "Bearer {key}"}}, "url": "/v2/pods"}}',  # JSON
    "DEBUG send: b'GET /pods HTTP/1.1\\r\\nAuthorization: Bearer {key}\\r\\n'",  # http.client
    "request failed for token {key}",  # no name, no header: by its prefix only
]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("make", [_pod_key, _vast_key])
def test_an_unknown_pod_key_is_masked_in_header_json_and_debug_forms(
        form: str, make: Callable[[], str]) -> None:
    key = make()
    assert "_" in key and "-" in key
    text = redact(form.format(key=key))
    assert key not in text
    # nothing of the key's tail is left either (a mask that stops at the first `-` would)
    assert key.rsplit("-", 1)[1] not in text and "***" in text


def test_ordinary_words_after_bearer_or_token_are_kept() -> None:
    # The header rule masks a credential, not English: these carry no key.
    for text in ("the bearer of bad news", "Authorization: none", "token count 1024"):
        assert redact(text) == text


def test_the_pod_key_in_kept_startup_lines_never_reaches_the_ledger_files(tmp_path: Path) -> None:
    key = _pod_key()
    ledger = Ledger(tmp_path / "home")
    record = PodRecord(run_tag="tp-k", provider="runpod", status="running")
    record.extra.startup = {"engine": "vllm", "facts": {},
                            "lines": [form.format(key=key) for form in FORMS]}
    ledger.put(record)
    ledger.put(record)  # a second write leaves ledger.last-good.json behind
    files = {p: p.read_text(errors="replace") for p in (tmp_path / "home").rglob("*")
             if p.is_file()}
    assert any(p.name == "ledger.last-good.json" for p in files), sorted(files)
    for path, text in files.items():
        assert key not in text, path.name


def test_a_manual_stop_keeps_the_key_variable_it_names() -> None:
    # teardown's and a volume's manual delete print the key as `$KEY_ENV`: not a secret
    line = 'curl -X DELETE -H "Authorization: Bearer $RUNPOD_API_KEY" https://x/v2/pods/abc'
    assert redact(line) == line
