"""A real S3-compatible server on loopback: moto's standalone server, in its own process.

`MotoServer.start()` runs `python -m moto.server -p <free port>` and waits until it
answers; `bucket()` creates a fresh bucket and gives the `s3://` URI and the
`storage_options` LanceDB (and `store.storage_options`) take for it. moto keeps its
buckets in memory, so an object store that goes away and comes back with its data is
modelled by a relay in front of it that refuses connections while `down` (`Relay`).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from typing import IO, Any

import boto3
import pytest

KEYS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
ENV_KEYS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class MotoUnavailable(Exception):
    """moto's server could not start here (the test skips and says why)."""


class MotoServer:
    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.buckets: list[str] = []

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> MotoServer:
        # its request log goes to a file: a pipe nobody reads would fill and stall it
        self._log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=self._log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                assert self._log is not None
                self._log.seek(0)
                err = self._log.read().decode(errors="replace")
                raise MotoUnavailable(f"moto.server exited with {self.proc.returncode}: "
                                      f"{err[-500:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    break
            except OSError:
                time.sleep(0.05)
        else:
            self.stop()
            raise MotoUnavailable(f"moto.server did not listen on {self.port} in {timeout} s")
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def client(self) -> Any:
        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1", **KEYS)

    def storage_options(self, *, keys: bool = True) -> dict[str, str]:
        """LanceDB's options for this server; `keys=False` leaves the keys to the
        environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), as production does."""
        opts = {"endpoint": self.endpoint, "allow_http": "true", "region": "us-east-1"}
        return {**opts, **KEYS} if keys else opts

    def bucket(self, prefix: str = "ctxwarden") -> str:
        """A new, empty bucket: its `s3://bucket/prefix` URI."""
        name = f"t-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        self.buckets.append(name)
        return f"s3://{name}/{prefix}"


@pytest.fixture(scope="session")
def moto() -> Iterator[MotoServer]:
    """One moto server for the test session (each test takes its own bucket)."""
    try:
        server = MotoServer().start()
    except MotoUnavailable as exc:
        pytest.skip(f"no S3-compatible server here: {exc}")
    try:
        yield server
    finally:
        server.stop()
