"""Fixtures: real `comb serve` brokers, built from this repository.

Two brokers start once per session, side by side: `plain`, whose NATS
wants a token, and `secure`, with TLS, two accounts (tenants) with users
and passwords, and a push-rate quota on tenant B. Each has its own private
PostgreSQL in a temporary directory. They are stopped with SIGINT at the
end of the session, pass or fail, and killed if they do not stop.
"""

from __future__ import annotations

import ctypes
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import pytest
from hypothesis import settings
from hypothesis.configuration import set_hypothesis_home_dir

import comb

# No example database in the working tree: CI runs in a fresh clone anyway.
# hypothesis keeps caches in its home directory, by default in the current
# one (the repository root when run as .ci/run does): keep it here, ignored.
set_hypothesis_home_dir(str(Path(__file__).resolve().parents[1] / ".hypothesis"))
settings.register_profile("comb", database=None)
settings.load_profile("comb")

REPO = Path(__file__).resolve().parents[3]
READY_TIMEOUT = 60.0
TOKEN = "plain-token-s3cret"
USERS = {"alice": "alice-secret", "bob": "bob-secret"}


@dataclass
class Broker:
    proc: subprocess.Popen
    log: Path
    host: str = "127.0.0.1"
    port: int = 0
    cafile: Optional[str] = None

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    def tls_context(self) -> ssl.SSLContext:
        assert self.cafile
        return ssl.create_default_context(cafile=self.cafile)

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            text = self.log.read_text(errors="replace")
            m = re.search(r'msg="comb ready" nats=\w+://([\d.]+):(\d+)', text)
            if m:
                self.host, self.port = m.group(1), int(m.group(2))
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"comb serve exited with {self.proc.returncode}:\n{text}")
            time.sleep(0.05)
        raise RuntimeError(f"comb serve not ready within {READY_TIMEOUT}s:\n{self.log.read_text(errors='replace')}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    # If pytest dies without its teardown, the broker gets a SIGINT and
    # drains: it stops its PostgreSQL as on Ctrl-C.
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGINT)


def start_broker(binary: Path, workdir: Path, name: str, config: str) -> Broker:
    d = workdir / name
    d.mkdir(mode=0o755)
    conf = d / "comb.conf"
    conf.write_text(config)
    log = d / "comb.log"
    out = open(log, "wb")
    proc = subprocess.Popen(
        [str(binary), "serve", "-config", str(conf), "-nats-listen", "127.0.0.1:0", "-nats-http", "0",
         "-http", "", "-pg-port", str(free_port()), "-data-dir", str(d / "data")],
        stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent,
    )
    out.close()
    return Broker(proc=proc, log=log)


def make_cert(d: Path) -> tuple[Path, Path]:
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True,
    )
    return cert, key


@pytest.fixture(scope="session")
def workdir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="comb-pytest-"))
    d.chmod(0o755)  # PostgreSQL runs as the postgres user when we are root
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def comb_binary(workdir: Path) -> Path:
    out = workdir / "comb"
    # -race: in .ci/run the Go tests ran with -race just before, so every
    # package is in the build cache already (a cold build takes minutes on
    # two cores), and a data race the Python client provokes is reported.
    subprocess.run(["go", "build", "-race", "-o", str(out), "./cmd/comb"], cwd=REPO, check=True)
    return out


@pytest.fixture(scope="session")
def brokers(comb_binary: Path, workdir: Path) -> Iterator[dict[str, Broker]]:
    cert, key = make_cert(workdir)
    started: dict[str, Broker] = {}
    try:
        started["plain"] = start_broker(comb_binary, workdir, "plain", f'authorization {{ token: "{TOKEN}" }}\n')
        started["secure"] = start_broker(comb_binary, workdir, "secure", f"""
tls {{ cert_file: "{cert}", key_file: "{key}" }}
accounts {{
  A: {{ users: [ {{user: alice, password: "{USERS['alice']}"}} ] }}
  B: {{ users: [ {{user: bob, password: "{USERS['bob']}"}} ] }}
}}
comb {{
  tenant_limits {{
    B {{ max_push_rate: 2 }}
  }}
}}
""")
        started["secure"].cafile = str(cert)
        for b in started.values():
            b.wait_ready()
        yield started
    finally:
        for b in started.values():
            b.stop()
    for name, b in started.items():
        log = b.log.read_text(errors="replace")
        assert "WARNING: DATA RACE" not in log, f"the {name} broker reported a data race:\n{log}"


@pytest.fixture(scope="session")
def plain(brokers: dict[str, Broker]) -> Broker:
    return brokers["plain"]


@pytest.fixture(scope="session")
def secure(brokers: dict[str, Broker]) -> Broker:
    return brokers["secure"]


@pytest.fixture
async def client(plain: Broker):
    c = await comb.connect(plain.url, token=TOKEN, timeout=10)
    try:
        yield c
    finally:
        await c.close()


@pytest.fixture
def queue() -> str:
    """A queue name of its own for each test."""
    return "t-" + uuid.uuid4().hex[:12]
