"""Network namespaces for multi-host tests: one bridge, one namespace per "host".

Each namespace gets a veth pair whose outer end is on a bridge in the test's own (root)
namespace, and a link-local address 169.254.<net>.<n>/24 on its inner end; the bridge holds
169.254.<net>.1. So every namespace and the test itself share one L2 segment — like hosts on
a LAN — and nothing else is reachable: a namespace's loopback is its own. Everything is
made by ``Hosts.create`` and removed by ``Hosts.remove`` (also on failure).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from dataclasses import dataclass, field


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


def namespaces_available() -> str | None:
    """None if this process can create namespaces, veth pairs and a bridge, else why not."""
    if os.environ.get("TXNLOG_TEST_NO_NETNS"):
        return "TXNLOG_TEST_NO_NETNS is set"
    if os.geteuid() != 0:
        return "not root"
    name = f"txprobe{os.getpid() % 100000}"
    try:
        _ip("netns", "add", name)
        _ip("netns", "del", name)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"ip netns failed: {exc}"
    return None


@dataclass
class Hosts:
    """Namespaces named ``<prefix><host>`` on bridge ``<prefix>br`` (names ≤ 15 chars)."""

    prefix: str
    net: int
    hosts: dict[str, str] = field(default_factory=dict)  # host -> address
    _made: list[tuple[str, ...]] = field(default_factory=list)

    @property
    def bridge(self) -> str:
        return f"{self.prefix}br"

    @property
    def gateway(self) -> str:
        """The test's (root namespace's) own address on the bridge."""
        return f"169.254.{self.net}.1"

    def create(self, names: list[str]) -> Hosts:
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            self._made.append(("link", "del", self.bridge))
            _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for i, host in enumerate(names, start=11):
                ns, outer, inner = (f"{self.prefix}{host}", f"{self.prefix}{host}o",
                                    f"{self.prefix}{host}i")
                _ip("netns", "add", ns)
                self._made.append(("netns", "del", ns))
                _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
                self._made.append(("link", "del", outer))
                _ip("link", "set", inner, "netns", ns)
                _ip("link", "set", outer, "master", self.bridge)
                _ip("link", "set", outer, "up")
                address = f"169.254.{self.net}.{i}"
                _ip("-n", ns, "addr", "add", f"{address}/24", "dev", inner)
                _ip("-n", ns, "link", "set", inner, "up")
                _ip("-n", ns, "link", "set", "lo", "up")
                self.hosts[host] = address
        except BaseException:
            self.remove()
            raise
        return self

    def namespace(self, host: str) -> str:
        return f"{self.prefix}{host}"

    def exec_prefix(self, host: str) -> list[str]:
        """Prefix a command with this to run it inside ``host``'s namespace."""
        return ["ip", "netns", "exec", self.namespace(host)]

    def remove(self) -> None:
        for cmd in reversed(self._made):
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                _ip(*cmd)
        self._made.clear()

    def pids_in(self, host: str) -> list[int]:
        out = subprocess.run(["ip", "netns", "pids", self.namespace(host)],
                             capture_output=True, text=True, timeout=30).stdout
        return [int(x) for x in out.split()]
