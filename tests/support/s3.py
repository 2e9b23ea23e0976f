"""A real S3-compatible server on loopback: moto's standalone server, in its own process.

`MotoServer.start()` runs `python -m moto.server -p <free port>` and waits until it
answers; `bucket()` creates a fresh bucket and gives the `s3://` URI and the
`storage_options` LanceDB (and `store.storage_options`) take for it. moto keeps its
buckets in memory, so an object store that goes away and comes back with its data is
modelled by a relay in front of it (`Relay`): a TCP forwarder on its own port that,
while down, has no listener (connections are refused) and has cut every open one.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
import tempfile
import threading
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

    def storage_options(self, *, keys: bool = True,
                        endpoint: str | None = None) -> dict[str, str]:
        """LanceDB's options for this server (or a `Relay` to it: `endpoint`); `keys=False`
        leaves the keys to the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), as
        production does."""
        opts = {"endpoint": endpoint or self.endpoint, "allow_http": "true",
                "region": "us-east-1"}
        return {**opts, **KEYS} if keys else opts

    def bucket(self, prefix: str = "ctxwarden") -> str:
        """A new, empty bucket: its `s3://bucket/prefix` URI."""
        name = f"t-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        self.buckets.append(name)
        return f"s3://{name}/{prefix}"


class Relay:
    """127.0.0.1:<port> forwarded to moto's port, switched off and on by the test. Runs its
    own event loop in a thread, so it serves an app in the test's loop and other
    processes alike.

    It accepts on its own socket rather than through `asyncio.start_server`: on Python
    3.11 a connection accepted in the same loop turn as `Server.close()` fails the
    server's `_attach` assertion and its socket is left to the garbage collector (an
    "unclosed transport" warning in whichever test runs next)."""

    def __init__(self, target_port: int) -> None:
        self.target = target_port
        self.port = free_port()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._listener: socket.socket | None = None
        self._open: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Relay:
        self._thread.start()
        self.up()
        return self

    def up(self) -> None:
        """Listen again, on the same port."""
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(10)

    def down(self) -> None:
        """Refuse new connections and cut the open ones (the store is unreachable)."""
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(10)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _listen(self) -> None:
        if self._listener is None:
            listener = socket.socket()
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", self.port))
            listener.listen(100)
            listener.setblocking(False)
            asyncio.get_running_loop().add_reader(listener, self._accept, listener)
            self._listener = listener

    def _accept(self, listener: socket.socket) -> None:
        """Accept what is waiting, synchronously in the loop: no accepted socket can be
        dropped between the accept and its task, as one awaited and cancelled can."""
        while True:
            try:
                conn, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            conn.setblocking(False)
            task = asyncio.create_task(self._relay(conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _close(self) -> None:
        if self._listener is not None:
            asyncio.get_running_loop().remove_reader(self._listener)
            self._listener.close()
            self._listener = None
        for w in list(self._open):
            w.transport.abort()

    async def _shutdown(self) -> None:
        await self._close()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _relay(self, conn: socket.socket) -> None:
        writer: asyncio.StreamWriter | None = None
        up_writer: asyncio.StreamWriter | None = None
        try:
            if self._listener is None:  # accepted as the relay went down: cut it too
                return
            reader, writer = await asyncio.open_connection(sock=conn)
            self._open.add(writer)
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
            self._open.add(up_writer)
            if self._listener is None:
                return
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        except OSError:
            pass
        finally:
            if writer is None:
                conn.close()
            for w in (writer, up_writer):
                if w is not None:
                    self._open.discard(w)
                    w.close()
                    with contextlib.suppress(OSError):
                        await w.wait_closed()


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, asyncio.IncompleteReadError):
        while data := await src.read(65536):
            dst.write(data)
            await dst.drain()
    with contextlib.suppress(OSError):
        if dst.can_write_eof():
            dst.write_eof()


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


@pytest.fixture
def relay(moto: MotoServer) -> Iterator[Relay]:
    """A relay to the session's moto server, up; the test switches it off and on."""
    r = Relay(moto.port).start()
    try:
        yield r
    finally:
        r.stop()
