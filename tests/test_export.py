"""Delivering the metrics: Pushgateway pushes over real loopback sockets, the atomic textfile, the exit code."""

from __future__ import annotations

import base64
import os
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmdoctor.render.prometheus import EndpointResult, result_for_report
from llmdoctor.reporting.publish import (
    ExportError,
    ExportSettings,
    check_push_gateway,
    check_textfile_dir,
    exit_code_after_export,
    export,
    push,
    write_textfile,
)
from llmdoctor.reporting.report import ExitCode
from tests.test_prometheus import _report


class _Recorder(ThreadingHTTPServer):
    """A loopback HTTP server that records each request and answers with `status`."""

    daemon_threads = True

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: _Recorder

    def do_PUT(self) -> None:  # noqa: N802 - http.server's naming
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.server.requests.append((self.command, self.path, dict(self.headers), body))
        self.send_response(self.server.status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - silence the access log
        pass


@pytest.fixture
def recorder() -> Iterator[_Recorder]:
    server = _Recorder()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_each_endpoint_replaces_its_own_group(recorder: _Recorder) -> None:
    results = [result_for_report(_report(), "prod"), result_for_report(_report("http://b:1/v1"), "staging/eu")]
    assert export(results, ExportSettings(push_gateway=recorder.url, job="nightly")) == []
    methods_paths = [(m, p) for m, p, _, _ in recorder.requests]
    # staging/eu holds a slash: prometheus-client encodes it as base64 in the grouping key
    eu = base64.urlsafe_b64encode(b"staging/eu").decode()
    assert methods_paths == [("PUT", "/metrics/job/nightly/instance/prod"),
                             ("PUT", f"/metrics/job/nightly/instance@base64/{eu}")]
    body = recorder.requests[0][3].decode()
    endpoints = {s.labels.get("endpoint") for f in text_string_to_metric_families(body) for s in f.samples}
    assert endpoints == {"prod"}  # one endpoint per group


def test_credentials_in_the_url_go_as_basic_auth_and_never_into_an_error(recorder: _Recorder) -> None:
    gateway = recorder.url.replace("http://", "http://ops:s3cr%40t@")
    push(result_for_report(_report(), "prod"), gateway)
    _, path, headers, _ = recorder.requests[0]
    assert headers["Authorization"] == "Basic " + base64.b64encode(b"ops:s3cr@t").decode()
    recorder.status = 400
    with pytest.raises(ExportError) as exc:
        push(result_for_report(_report(), "prod"), gateway)
    assert "s3cr" not in str(exc.value) and "ops" not in str(exc.value)
    assert "***@127.0.0.1" in str(exc.value) and "400" in str(exc.value)


def test_a_refused_gateway_is_one_line_and_stops_the_pushes() -> None:
    results = [result_for_report(_report(), "a"), result_for_report(_report("http://b:1/v1"), "b")]
    errors = export(results, ExportSettings(push_gateway=f"http://127.0.0.1:{_free_port()}"))
    assert len(errors) == 1 and "\n" not in errors[0]
    assert "failed" in errors[0] and "refused" in errors[0].lower() and "(1 more endpoint not pushed)" in errors[0]


def test_a_silent_gateway_is_bounded_by_the_timeout() -> None:
    with socket.socket() as listener:  # accepts (the kernel's backlog), never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(ExportError, match="timed out"):
            push(result_for_report(_report(), "a"), f"http://127.0.0.1:{port}", timeout_s=0.5)
        assert time.monotonic() - started < 10


@pytest.mark.parametrize("url, message", [
    ("ftp://gw:9091", "use an http:// or https:// URL"),
    ("http://", "the URL has no host"),
    ("http://gw:notaport", "invalid URL"),
])
def test_unusable_gateway_urls_are_refused_up_front(url: str, message: str) -> None:
    with pytest.raises(ExportError, match=message):
        check_push_gateway(url)
    check_push_gateway("gw.internal:9091")  # no scheme: prometheus-client's http:// default


def test_the_textfile_is_replaced_atomically(tmp_path: Path) -> None:
    results = [result_for_report(_report(), "prod")]
    path = Path(write_textfile(results, str(tmp_path), job="nightly"))
    assert path == tmp_path / "nightly.prom"
    first_inode = path.stat().st_ino
    write_textfile([EndpointResult("prod", "http://x/v1", None)], str(tmp_path), job="nightly")
    assert path.stat().st_ino != first_inode  # a new file renamed over the old one, never rewritten in place
    assert os.listdir(tmp_path) == ["nightly.prom"]  # no temporary file left
    families = {f.name: f for f in text_string_to_metric_families(path.read_text())}
    status = {s.labels["status"]: s.value for s in families["llmdoctor_status"].samples}
    assert status["unknown"] == 1


def test_textfile_directory_problems(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="no such directory"):
        check_textfile_dir(str(tmp_path / "missing"))
    check_textfile_dir(str(tmp_path))
    errors = export([result_for_report(_report(), "a")], ExportSettings(textfile_dir=str(tmp_path / "gone")))
    assert errors and errors[0].startswith("cannot write --textfile")


def test_a_failed_export_makes_the_exit_code_at_least_unknown() -> None:
    assert exit_code_after_export(ExitCode.OK, ["push failed"]) == ExitCode.UNKNOWN
    assert exit_code_after_export(ExitCode.WARNING, ["push failed"]) == ExitCode.UNKNOWN
    assert exit_code_after_export(ExitCode.CRITICAL, ["push failed"]) == ExitCode.CRITICAL
    assert exit_code_after_export(ExitCode.WARNING, []) == ExitCode.WARNING


def test_a_job_name_must_be_usable_as_a_file_name() -> None:
    from llmdoctor.reporting.publish import check_job

    check_job("llmdoctor-nightly.eu_1")
    for bad in ("", "../etc", "a/b", "with space", ".hidden"):
        with pytest.raises(ExportError, match="--push-job"):
            check_job(bad)
