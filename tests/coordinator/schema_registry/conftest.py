"""One root served by a coordinator, a gateway and a schema registry process, shared by all
the registry's tests (each test uses subjects and topics of its own)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from coordinator_proc import CoordinatorProc
from gateway_proc import GatewayProc
from registry_proc import RegistryProc, Served


@pytest.fixture(scope="session")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = "file://" + str(tmp_path_factory.mktemp("sr-root"))
    coord = CoordinatorProc(root)
    try:
        coord.wait_healthy()
        gateway = GatewayProc(root)
        registry = RegistryProc(root)
        try:
            registry.wait_listening()
            gateway.wait_listening()
            yield Served(root, coord, gateway, registry)
        finally:
            registry.stop()
            gateway.stop()
    finally:
        coord.stop()
