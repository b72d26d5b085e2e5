"""Hosts as Linux network namespaces: each host has its own network stack and an address on one
or more networks; each network is a bridge in a switch namespace of its own. A cut is a
switch port leaving its bridge (packets vanish: connections stay up, as with a pulled cable
or a dead router, until their pings go unanswered); a slow link is a token-bucket qdisc on
both ends of a host's cable (the kernel here has no netem). Everything lives in namespaces
this module creates and deletes: no address, route or rule of the machine itself is touched.

Needs root and iproute2 (`ip`, `tc`). Used by the fault campaign (harness.chaos)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass, field

_CLONE_NEWNET = 0x40000000


class LabUnavailable(RuntimeError):
    pass


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


def _in(netns: str, *argv: str) -> None:
    done = subprocess.run(["ip", "netns", "exec", netns, *argv], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{netns}: {' '.join(argv)}: {done.stderr.strip()}")


@dataclass
class Host:
    """A network namespace with an address on each of its networks (`addresses`: network ->
    IPv4 address). `command(argv)` runs argv there."""

    name: str
    netns: str
    addresses: dict[str, str]
    lab: Lab
    cut_from: set[str] = field(default_factory=set)
    slowed: bool = False

    def address(self, network: str | None = None) -> str:
        return self.addresses[network or next(iter(self.addresses))]

    def command(self, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.netns, *argv]

    def cut(self, network: str) -> None:
        """This host's cable to `network` pulled at the switch: nothing passes either way."""
        _ip("-n", self.lab.switch, "link", "set", self.lab.port(self, network), "nomaster")
        self.cut_from.add(network)

    def restore(self, network: str) -> None:
        _ip("-n", self.lab.switch, "link", "set", self.lab.port(self, network), "master", f"br-{network}")
        self.cut_from.discard(network)

    def slow(self, kbit: int) -> None:
        """Every one of this host's links capped at `kbit` kbit/s each way."""
        for network in self.addresses:
            for netns, dev in ((self.netns, network), (self.lab.switch, self.lab.port(self, network))):
                _in(netns, "tc", "qdisc", "replace", "dev", dev, "root", "tbf",
                    "rate", f"{kbit}kbit", "burst", "32kb", "latency", "400ms")  # fmt: skip
        self.slowed = True

    def fast(self) -> None:
        for network in self.addresses:
            for netns, dev in ((self.netns, network), (self.lab.switch, self.lab.port(self, network))):
                with contextlib.suppress(RuntimeError):  # none there
                    _in(netns, "tc", "qdisc", "del", "dev", dev, "root")
        self.slowed = False

    def heal(self) -> None:
        for network in list(self.cut_from):
            self.restore(network)
        if self.slowed:
            self.fast()


def _setns(path: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {path}")
    finally:
        os.close(fd)


class Lab:
    """Namespaces named `<prefix>-<host>`, and `<prefix>-switch` holding a bridge per network.
    `networks`: network name -> its /24 prefix ("10.231.1")."""

    def __init__(self, prefix: str, networks: dict[str, str]) -> None:
        if os.geteuid() != 0:
            raise LabUnavailable("hosts as network namespaces need root (ip netns): run as root")
        if not (shutil.which("ip") and shutil.which("tc")):
            raise LabUnavailable(
                "hosts as network namespaces need iproute2 (ip, tc): apt-get install iproute2"
            )
        self.prefix = prefix
        self.networks = networks
        self.switch = f"{prefix}-switch"
        self.hosts: dict[str, Host] = {}
        self._ports: dict[tuple[str, str], str] = {}
        self._home: int | None = None  # the network the caller left by enter()
        self.close()  # what a run that was killed left behind
        try:
            _ip("netns", "add", self.switch)
            _in(self.switch, "ip", "link", "set", "lo", "up")
            for network in networks:
                _ip("-n", self.switch, "link", "add", f"br-{network}", "type", "bridge")
                _ip("-n", self.switch, "link", "set", f"br-{network}", "up")
        except BaseException:
            self.close()
            raise

    def port(self, host: Host, network: str) -> str:
        return self._ports[(host.name, network)]

    def add_host(self, name: str, networks: list[str], number: int) -> Host:
        """A namespace with loopback up and `<prefix of network>.<number>` on each network."""
        netns = f"{self.prefix}-{name}"
        _ip("netns", "add", netns)
        _in(netns, "ip", "link", "set", "lo", "up")
        host = Host(name, netns, {}, self)
        for network in networks:
            port = f"p{len(self._ports)}"
            # The pair is made in the switch, one end moved to the host and named after the network.
            _ip(
                "-n",
                self.switch,
                "link",
                "add",
                port,
                "type",
                "veth",
                "peer",
                "name",
                network,
                "netns",
                netns,
            )
            _ip("-n", self.switch, "link", "set", port, "master", f"br-{network}")
            _ip("-n", self.switch, "link", "set", port, "up")
            address = f"{self.networks[network]}.{number}"
            _ip("-n", netns, "addr", "add", f"{address}/24", "dev", network)
            _ip("-n", netns, "link", "set", network, "up")
            host.addresses[network] = address
            self._ports[(name, network)] = port
        self.hosts[name] = host
        return host

    def enter(self, host: Host) -> None:
        """Move the calling thread (and every thread and process it starts afterwards) into
        `host`'s network: call it from the main thread before any other starts. close()
        moves it back."""
        if self._home is None:
            self._home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        _setns(f"/var/run/netns/{host.netns}")

    def close(self) -> None:
        """Every namespace of this prefix deleted, and whatever still runs in one killed (a run
        cut short can leave its servers behind), except the closer: a campaign runs in its control
        host's namespace."""
        if self._home is not None:
            _setns(f"/proc/self/fd/{self._home}")
            os.close(self._home)
            self._home = None
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        for line in listed.splitlines():
            netns = line.split()[0] if line.strip() else ""
            if netns.startswith(f"{self.prefix}-"):
                pids = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True).stdout
                for pid in pids.split():
                    if pid == str(os.getpid()):
                        continue
                    with contextlib.suppress(ProcessLookupError, ValueError):
                        os.kill(int(pid), signal.SIGKILL)
                subprocess.run(["ip", "netns", "del", netns], capture_output=True)
