"""A real cluster for tests: one `nereus oxia` process and N `nereus broker` processes.

The brokers share a ``file://`` directory or a bucket of a real moto S3 server. The
test reads the metadata plane through its own Oxia-protocol client (owners, brokers,
index entries) and counts objects in the store directly. Every wait is on a
condition with a deadline; a failure message carries the tails of the logs.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from nereus.broker.cluster.membership import BROKERS
from nereus.broker.cluster.ownership import OWNERS
from nereus.meta import connect
from nereus.storage import view
from tests.moto_server import BUCKET, CREDENTIALS
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
NEREUS = [sys.executable, "-m", "nereus.cli", "--log-level", "INFO"]
SESSION_TIMEOUT = 3.0


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def tail(path: Path, lines: int = 60) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log {path})"
    return "\n".join(text[-lines:])


def object_node(name: str) -> str:
    """The writer node id in a WAL object name ``wal/{ms}-{node}[~E.W.A]-{seq}`` (node is ``{broker}-{pid}``)."""
    base = name.rsplit("/", 1)[-1] if "wal/" not in name else name.split("wal/", 1)[1]
    _ms, _, rest = base.partition("-")
    return rest.rsplit("-", 1)[0].split("~", 1)[0]  # "~E.W.A": written to WAL replicas first


class Broker:
    """One ``nereus broker`` process; restartable on the same name and ports."""

    def __init__(self, cluster: "Cluster", name: str, zone: str) -> None:
        self.cluster = cluster
        self.name = name
        self.zone = zone
        self.ports = cluster.new_ports()
        self.log = cluster.root / f"broker-{name}.log"
        self.proc: subprocess.Popen | None = None
        self.pids: list[int] = []  # every incarnation's pid (its WAL node id is f"{name}-{pid}")
        self.paused = False
        self.launched_ms = 0
        self.group: int | None = None  # run as this group id (a network cut matches its packets by owner)

    # -- addresses ----------------------------------------------------------------------
    @property
    def pulsar_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.ports['pulsar']}"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['http']}"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.ports['kafka']}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def node_id(self) -> str:
        """The WAL writer node id of the running incarnation (object names carry it)."""
        return f"{self.name}-{self.pid}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def wal_dir(self) -> Path:
        return self.cluster.root / f"wal-{self.name}"

    # -- life cycle ---------------------------------------------------------------------
    def launch(self) -> None:
        c = self.cluster
        args = [*NEREUS, "broker", "--metadata", c.metadata_url, "--object-store", c.object_store_url,
                "--zone", self.zone, "--broker-name", self.name, "--session-timeout", str(c.session_timeout),
                "--compaction-interval", "0", "--pulsar-port", str(self.ports["pulsar"]),
                "--kafka-port", str(self.ports["kafka"]), "--http-port", str(self.ports["http"]),
                *(["--wal-dir", str(self.wal_dir)] if c.wal else []), *c.broker_args]
        with open(self.log, "ab") as log:
            log.write(f"\n===== launch {time.strftime('%H:%M:%S')} =====\n".encode())
            if self.group is not None:
                # setpriv changes the group, not Popen(group=): that makes Python fork rather than
                # vfork, and a forked child of this process (gRPC threads, fork handlers) can crash.
                args = ["setpriv", f"--regid={self.group}", "--clear-groups", *args]
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
        self.pids.append(self.proc.pid)
        self.launched_ms = int(time.time() * 1000)
        self.paused = False

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Listening on every port and registered (this incarnation) as active in the metadata plane."""
        def ready() -> bool:
            if not self.alive() and len(self.pids) == 1 and "address already in use" in tail(self.log, 5):
                self.ports = self.cluster.new_ports()  # another process took a port first: new ones
                self.pids.clear()
                self.launch()
                return False
            if not self.alive():
                raise AssertionError(f"broker {self.name} exited with {self.proc.returncode}:\n{tail(self.log)}")
            if not all(port_open(p) for p in self.ports.values()):
                return False
            record = self.cluster.brokers().get(self.name)
            return record is not None and record["state"] == "active" and record["started_ms"] >= self.launched_ms
        self.cluster.wait_for(ready, timeout, f"broker {self.name} ready")

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs; its session expires after the session timeout."""
        if self.alive():
            if self.paused:
                self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)
        self.paused = False

    def stop(self, timeout: float = 90.0) -> int:
        """SIGTERM: the broker hands its topics over, then exits."""
        if not self.alive():
            return self.proc.returncode if self.proc else 0
        if self.paused:
            self.resume()
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"broker {self.name} did not stop on SIGTERM within {timeout}s:\n{tail(self.log)}")

    def pause(self) -> None:
        """SIGSTOP: the process freezes (a zombie once its session expires)."""
        self.proc.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def metrics(self) -> str:
        with urllib.request.urlopen(f"{self.http_url}/metrics", timeout=10) as response:
            return response.read().decode()


class Cluster:
    """``nereus oxia`` + brokers over a shared object store (``file`` or ``s3``)."""

    def __init__(self, root: Path, zones: list[str], *, store: str = "file", moto_endpoint: str | None = None,
                 session_timeout: float = SESSION_TIMEOUT, broker_args: list[str] | None = None,
                 wal: bool = False) -> None:
        """``wal``: each broker keeps a WAL replica in a directory of its own (``wal_dir``)."""
        self.root = Path(root)
        self.wal = wal
        self.root.mkdir(parents=True, exist_ok=True)
        self.store = store
        self.session_timeout = session_timeout
        self.broker_args = broker_args or []
        self._used_ports: set[int] = set()
        self.oxia_port = self.new_ports(1)[0]
        self.oxia_log = self.root / "oxia.log"
        self.oxia: subprocess.Popen | None = None
        if store == "file":
            self.objects_dir = self.root / "objects"
            self.objects_dir.mkdir(exist_ok=True)
            self.object_store_url = self.objects_dir.as_uri()
        elif store == "s3":
            assert moto_endpoint, "the s3 store needs a moto endpoint"
            self.moto_endpoint = moto_endpoint
            self.s3_prefix = f"cluster-{uuid.uuid4().hex[:12]}"
            query = "&".join(f"{k}={v}" for k, v in {"endpoint": moto_endpoint, **CREDENTIALS}.items())
            self.object_store_url = f"s3://{BUCKET}/{self.s3_prefix}?{query}"
        else:
            raise ValueError(store)
        self.brokers_list: list[Broker] = []
        self._next_index = 0
        for zone in zones:
            self._new_broker(zone)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="cluster-meta", daemon=True)
        self._thread.start()
        self._meta = None
        self._s3 = None
        atexit.register(self._kill_all)  # no process outlives an interrupted test run

    def _kill_all(self) -> None:
        for proc in [self.oxia, *(b.proc for b in self.brokers_list)]:
            if proc is not None and proc.poll() is None:
                proc.kill()

    # -- addresses ----------------------------------------------------------------------
    @property
    def metadata_url(self) -> str:
        return f"oxia://127.0.0.1:{self.oxia_port}"

    def broker(self, name: str) -> Broker:
        return next(b for b in self.brokers_list if b.name == name)

    @property
    def running(self) -> list[Broker]:
        return [b for b in self.brokers_list if b.alive()]

    def service_url(self, *brokers: Broker) -> str:
        """A multi-host ``pulsar://h:p1,h:p2`` URL of ``brokers`` (default: every running broker)."""
        brokers = brokers or tuple(self.running)
        return "pulsar://" + ",".join(f"127.0.0.1:{b.ports['pulsar']}" for b in brokers)

    def bootstrap(self, *brokers: Broker) -> str:
        brokers = brokers or tuple(self.running)
        return ",".join(b.bootstrap for b in brokers)

    def http_urls(self) -> list[str]:
        return [b.http_url for b in self.running]

    # -- life cycle ---------------------------------------------------------------------
    def new_ports(self, count: int = 3) -> dict[str, int] | list[int]:
        """Free ports never handed out before in this cluster (three: a broker's pulsar, kafka, http)."""
        ports: list[int] = []
        while len(ports) < count:
            port = free_port()
            if port not in self._used_ports:
                self._used_ports.add(port)
                ports.append(port)
        return dict(zip(("pulsar", "kafka", "http"), ports)) if count == 3 else ports

    def _new_broker(self, zone: str) -> Broker:
        self._next_index += 1
        broker = Broker(self, f"b{self._next_index}", zone)
        self.brokers_list.append(broker)
        return broker

    def start(self, timeout: float = 90.0) -> "Cluster":
        with open(self.oxia_log, "ab") as log:
            self.oxia = subprocess.Popen(
                [*NEREUS, "oxia", "--data-dir", str(self.root / "meta"), "--port", str(self.oxia_port)],
                stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
        self.wait_for(lambda: self._oxia_up(), 60, "nereus oxia listening")
        self._meta = self.call(self._connect())
        for broker in self.brokers_list:
            broker.launch()
        for broker in self.brokers_list:
            broker.wait_ready(timeout)
        self.wait_ring_settled()
        return self

    def _oxia_up(self) -> bool:
        if self.oxia.poll() is not None:
            raise AssertionError(f"nereus oxia exited:\n{tail(self.oxia_log)}")
        return port_open(self.oxia_port)

    async def _connect(self):
        return connect(self.metadata_url)

    def close(self) -> None:
        for broker in self.brokers_list:
            if broker.alive():
                broker.kill()
        if self._meta is not None:
            try:
                self.call(self._meta.close(), timeout=10)
            except Exception:
                pass
            self._meta = None
        if self.oxia is not None and self.oxia.poll() is None:
            self.oxia.terminate()
            try:
                self.oxia.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.oxia.kill()
                self.oxia.wait()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        atexit.unregister(self._kill_all)

    def add_broker(self, zone: str, timeout: float = 90.0) -> Broker:
        broker = self._new_broker(zone)
        broker.launch()
        broker.wait_ready(timeout)
        return broker

    def restart(self, broker: Broker, timeout: float = 90.0) -> None:
        """Stop (SIGTERM) if running, start again on the same name and ports, wait until registered."""
        broker.stop()
        broker.launch()
        broker.wait_ready(timeout)

    def wait_ring_settled(self, timeout: float = 60.0) -> None:
        """Every running broker is registered active, and no stopped broker is."""
        want = {b.name for b in self.running if not b.paused}
        self.wait_for(lambda: {n for n, r in self.brokers().items() if r["state"] == "active"} == want,
                      timeout, f"registry == {sorted(want)}")

    # -- waiting and diagnostics ----------------------------------------------------------
    def logs(self, lines: int = 40) -> str:
        parts = [f"--- oxia ---\n{tail(self.oxia_log, lines)}"]
        for broker in self.brokers_list:
            parts.append(f"--- broker {broker.name} (zone {broker.zone}, pids {broker.pids}) ---\n"
                         f"{tail(broker.log, lines)}")
        return "\n".join(parts)

    def wait_for(self, condition: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
        """Poll ``condition`` until truthy (its value is returned) or fail after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        last_exc: Exception | None = None
        while True:
            try:
                value = condition()
                if value:
                    return value
            except AssertionError:
                raise
            except Exception as exc:  # transient (a broker restarting, a metadata hiccup)
                last_exc = exc
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}"
                                     f"{f' (last error: {last_exc!r})' if last_exc else ''}\n{self.logs()}")
            time.sleep(interval)

    # -- the metadata plane -------------------------------------------------------------
    def call(self, coro, timeout: float = 30.0):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _scan(self, prefix: str) -> dict[str, bytes]:
        return {rec.key: rec.value async for rec in self._meta.range_scan(prefix, prefix + "\uffff")}

    def brokers(self) -> dict[str, dict]:
        """Registered brokers: name -> {state, zone, node_id, incarnation, started_ms, load}."""
        out = {}
        for key, raw in self.call(self._scan(BROKERS)).items():
            value = json.loads(raw)
            name = value["address"]["name"]
            out[name] = {"state": value["state"], "zone": value["address"]["zone"],
                         "node_id": value["address"]["node_id"], "incarnation": value["incarnation"],
                         "started_ms": value.get("started_ms", 0), "load": value.get("load") or {}}
        return out

    def pending_markers(self) -> dict[str, dict]:
        """The collector's pending markers (reserved blocks of object names, unfinished writes)."""
        return {key: json.loads(raw) for key, raw in self.call(self._scan("/nereus/gc/pending/")).items()}

    def owners(self) -> dict[str, str]:
        """Topic -> the broker name in its ownership record."""
        return {unquote(key[len(OWNERS):]): json.loads(raw)["broker"]
                for key, raw in self.call(self._scan(OWNERS)).items()}

    def owner(self, topic: str) -> str | None:
        return self.owners().get(topic)

    def index_entries(self, stream: str) -> list:
        """Every committed index entry of ``stream`` (index groups and the tail's pending ones)."""
        async def read():
            sid = await view.stream_id(self._meta, stream)
            if sid is None:
                return []
            entries = [e async for e in view.indexed_entries(self._meta, sid)]
            seen = {(e.base, e.generation) for e in entries}
            tail_now = await view.tail(self._meta, sid)
            entries += [e for e in tail_now.pending if (e.base, e.generation) not in seen]
            return sorted(entries, key=lambda e: e.base)
        return self.call(read())

    # -- the object store ---------------------------------------------------------------
    def objects(self, prefix: str = "") -> dict[str, float]:
        """Every object (key relative to the store root) -> its modification time (epoch seconds)."""
        if self.store == "file":
            out = {}
            for dirpath, dirs, files in os.walk(self.objects_dir):
                dirs[:] = [d for d in dirs if not d.startswith(".")]  # .tmp-staging: unpublished writes
                for f in files:
                    path = Path(dirpath) / f
                    key = path.relative_to(self.objects_dir).as_posix()
                    if key.startswith(prefix) and not f.startswith("."):
                        try:
                            out[key] = path.stat().st_mtime
                        except FileNotFoundError:
                            pass  # deleted meanwhile (GC)
            return out
        if self._s3 is None:
            import boto3

            self._s3 = boto3.client("s3", endpoint_url=self.moto_endpoint, region_name=CREDENTIALS["region"],
                                    aws_access_key_id=CREDENTIALS["access_key_id"],
                                    aws_secret_access_key=CREDENTIALS["secret_access_key"])
        out = {}
        root = self.s3_prefix + "/"
        for page in self._s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=root + prefix):
            for item in page.get("Contents", []):
                out[item["Key"][len(root):]] = item["LastModified"].timestamp()
        return out

    def wal_objects(self) -> dict[str, float]:
        return self.objects("wal/")
