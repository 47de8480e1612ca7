"""The coordinator client's keep-alive pool when the coordinator dies under it.

A killed coordinator leaves every idle pooled connection of a process stale (a gateway, with
its many threads, holds many). A call must drop them one after the other and then fail as
an unreachable coordinator (OSError, which callers retry) or get through on a new
connection, never fail otherwise: the gateway answered Kafka clients UNKNOWN_SERVER_ERROR
for an AssertionError raised after two stale connections in a row (found by the chaos
harness's gateway-coordinator-kill class).
"""

from __future__ import annotations

import socket
import threading

import pytest
from txnlog.coordinator.client import coordinator_client as client_mod


def _pool_stale(listener: socket.socket, endpoint: str, n: int) -> None:
    """``n`` pooled connections whose server side is closed (as by a killed coordinator)."""
    port = listener.getsockname()[1]
    conns = [client_mod._Conn("http", "127.0.0.1", port, None) for _ in range(n)]
    for _ in conns:
        peer, _ = listener.accept()
        peer.close()
    for c in conns:
        client_mod._give(endpoint, None, c)


@pytest.mark.parametrize("stale", [1, 2, 5])
def test_stale_pooled_connections_then_nobody_listening_is_unreachable(stale: int) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    endpoint = f"http://127.0.0.1:{listener.getsockname()[1]}"
    _pool_stale(listener, endpoint, stale)
    listener.close()  # nothing listens there any more
    with pytest.raises(OSError):
        client_mod._http(endpoint, "POST", "/x", b"", 2.0)


@pytest.mark.parametrize("stale", [1, 2, 5])
def test_stale_pooled_connections_then_a_new_connection_gets_through(stale: int) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    endpoint = f"http://127.0.0.1:{listener.getsockname()[1]}"
    _pool_stale(listener, endpoint, stale)

    def answer_once() -> None:
        peer, _ = listener.accept()
        with peer:
            data = b""
            while b"\r\n\r\n" not in data:
                data += peer.recv(4096)
            peer.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")

    t = threading.Thread(target=answer_once, daemon=True)
    t.start()
    try:
        assert client_mod._http(endpoint, "POST", "/x", b"", 5.0) == (200, b"{}")
    finally:
        t.join(5)
        listener.close()
