"""A raw Kafka connection for tests and benches: kio-encoded requests over one socket.

For what the real clients (confluent-kafka, kafka-python, aiokafka) cannot be made to send:
a request version or field they never set, fuzzed bodies, SASL tokens of any shape, or one
request at a time without a client's own batching and retries in the figure. One request
is in flight at a time; each ``send`` returns the decoded response body.
"""

from __future__ import annotations

import io
import socket
import struct
from typing import Any

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36


class RawKafkaConnection:
    """One connection to ``127.0.0.1:port``, authenticated with SASL PLAIN as ``user`` when
    one is given (else not at all: the caller may send its own handshake)."""

    def __init__(self, port: int, user: str | None = None, password: str = "", *,
                 client_id: str = "raw", timeout: float = 60.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.client_id = client_id
        self.corr = 0
        if user is not None:
            self.authenticate_plain(user, password)

    def authenticate_plain(self, user: str, password: str) -> None:
        """SaslHandshake (PLAIN) then SaslAuthenticate; both must succeed."""
        from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
        from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

        shake = self.send(SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
        assert shake.error_code == 0, shake
        token = f"\0{user}\0{password}".encode()
        auth = self.send(SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(auth_bytes=token))
        assert auth.error_code == 0, auth

    def send(self, api_key: int, version: int, body: Any) -> Any:
        """Send ``body`` (a kio request entity) as ``api_key`` v``version``; its response."""
        from kio.index import load_response_schema
        from kio.serial import entity_reader

        frame = self.exchange(api_key, version, body)
        resp_cls = load_response_schema(api_key, version)
        _header, n = entity_reader(resp_cls.__header_schema__)(frame, 0)
        return entity_reader(resp_cls)(frame, n)[0]

    def exchange(self, api_key: int, version: int, body: Any) -> bytes:
        """Send ``body`` and return the response frame undecoded (its header first, with
        correlation id ``self.corr``): for answers kio cannot decode, or need not."""
        from kio.serial import entity_writer

        self.corr += 1
        buf = io.BytesIO()
        header_cls = type(body).__header_schema__
        entity_writer(header_cls)(buf, header_cls(request_api_key=api_key,
                                                  request_api_version=version,
                                                  correlation_id=self.corr,
                                                  client_id=self.client_id))
        entity_writer(type(body))(buf, body)
        data = buf.getvalue()
        self.sock.sendall(struct.pack(">i", len(data)) + data)
        return self.recv_exactly(struct.unpack(">i", self.recv_exactly(4))[0])

    def recv_exactly(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("the gateway closed the connection")
            out += chunk
        return out

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawKafkaConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def request_once(port: int, api_key: int, version: int, body: Any) -> Any:
    """One request on a fresh, unauthenticated connection; the decoded response."""
    with RawKafkaConnection(port) as conn:
        return conn.send(api_key, version, body)
