"""The probe against what llama-server really answers (recorded on the H200, tests/fixtures/llamacpp):
its per-request `timings` kept beside the probe's own figures, and the token-identity gate reading
llama.cpp's token ids."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tailpod.agent.probes import gate, rows, stream
from tests import paths

FIXTURES = paths.FIXTURES / "llamacpp"
SPEC = stream.RequestSpec(index=0, path="/v1/chat/completions", body=b"{}", cache="cold", api="chat")


def _recorder_for(name: str) -> stream.StreamRecorder:
    rec = stream.StreamRecorder("chat")
    rec.start()
    data = (FIXTURES / name).read_bytes()
    for i in range(0, len(data), 97):  # arbitrary chunking, as TCP would cut it
        rec.feed(data[i : i + 97], float(i))
    rec.finish(float(len(data)))
    return rec


def test_server_timings_kept_per_request() -> None:
    plain = _recorder_for("h200_tiny_plain.chat_stream.txt")
    result = stream.result_from_recorder(SPEC, plain)
    assert result.ok and result.completion_tokens == 32
    assert result.server_timings == {
        "prompt_n": 18, "prompt_ms": 49.098, "cache_n": 0, "predicted_n": 32,
        "predicted_ms": 23.485, "predicted_per_second": 1319.9914839259102,
    }  # fmt: skip
    plan = rows.CellPlan(arm="plain", concurrency=1, rep=0, prompt_class="prose", cache="cold")
    row = rows.request_row("run", plan, result, "pod")
    assert row["server_timings"]["prompt_ms"] == 49.098
    spec = _recorder_for("h200_tiny_spec.chat_stream.txt")
    timings = stream.result_from_recorder(SPEC, spec)
    assert timings.server_timings is not None
    assert (timings.server_timings["draft_n"], timings.server_timings["draft_n_accepted"]) == (26, 24)


def test_no_timings_no_field() -> None:
    rec = stream.StreamRecorder("chat")
    rec.start()
    rec.feed(b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'
             b'data: {"choices":[],"usage":{"completion_tokens":1,"prompt_tokens":3}}\n\n'
             b"data: [DONE]\n\n", 1.0)  # fmt: skip
    rec.finish(2.0)
    result = stream.result_from_recorder(SPEC, rec)
    plan = rows.CellPlan(arm="a", concurrency=1, rep=0, prompt_class="p", cache="cold")
    assert result.server_timings is None
    assert "server_timings" not in rows.request_row("r", plan, result, "pod")


class _LlamaServerReplay(ThreadingHTTPServer):
    """Answers as llama-server 0c1e57098 did on the H200: /completion with the recorded body (its
    `tokens`, optionally with one token changed), /v1/chat/completions without token ids, 404 for
    SGLang's /generate."""

    def __init__(self, completion: dict[str, Any]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.completion = completion
        self.bodies: list[tuple[str, dict[str, Any]]] = []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: _LlamaServerReplay

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": "tailpod", "object": "model"}]})
        else:
            self._send(404, {"error": {"code": 404, "message": "File Not Found"}})

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
        self.server.bodies.append((self.path, body))
        if self.path == "/completion":
            n = int(body.get("n_predict", 16))
            answer = dict(self.server.completion)
            answer["tokens"] = answer["tokens"][:n] if body.get("return_tokens") else []
            self._send(200, answer)
        elif self.path == "/v1/chat/completions":
            self._send(200, {"choices": [{"index": 0, "finish_reason": "length",
                                          "message": {"role": "assistant", "content": "x"}}]})  # fmt: skip
        else:
            self._send(404, {"error": {"code": 404, "message": "File Not Found"}})


@pytest.fixture()
def replay() -> Iterator[Any]:
    servers: list[_LlamaServerReplay] = []

    def start(name: str, change_at: int | None = None) -> _LlamaServerReplay:
        completion = json.loads((FIXTURES / name).read_text())
        if change_at is not None:
            completion["tokens"][change_at] += 1
        server = _LlamaServerReplay(completion)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_gate_compares_llamacpp_token_ids(replay: Any, tmp_path: Path) -> None:
    # The H200 gave the same 32 token ids with and without the draft model.
    plain = replay("h200_tiny_plain.completion_tokens.json")
    spec = replay("h200_tiny_spec.completion_tokens.json")
    ref_file = tmp_path / "ref.json"
    ref = gate.save_gate_reference(plain.base_url, str(ref_file), max_tokens=32)
    assert ref["token_source"] == "tokens" and len(ref["outputs"][0]) == 32
    result = gate.run_gate_against_reference(ref, spec.base_url)
    assert result["status"] == "pass" and result["method"] == "token_ids"
    assert result["token_source"] == "tokens"
    path, body = spec.bodies[-1]
    assert path == "/completion" and body["return_tokens"] is True
    assert body["temperature"] == 0 and body["ignore_eos"] is True and body["n_predict"] == 32


def test_gate_names_the_first_differing_llamacpp_token(replay: Any, tmp_path: Path) -> None:
    plain = replay("h200_tiny_plain.completion_tokens.json")
    changed = replay("h200_tiny_spec.completion_tokens.json", change_at=9)
    ref = gate.save_gate_reference(plain.base_url, str(tmp_path / "ref.json"), max_tokens=32)
    result = gate.run_gate_against_reference(ref, changed.base_url)
    assert result["status"] == "fail"
    assert result["first_mismatch"]["prompt"] == 0 and result["first_mismatch"]["position"] == 9


def test_empty_tokens_are_not_a_token_source() -> None:
    # A server that ignores return_tokens answers "tokens": []: two such lists must not compare.
    assert gate._extract({"content": "abc", "tokens": []}, "tokens") is None
    assert gate._extract({"content": "abc", "tokens": [1, 2]}, "tokens") == [1, 2]
