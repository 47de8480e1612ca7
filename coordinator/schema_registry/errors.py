"""Confluent Schema Registry's errors: HTTP status, ``error_code`` and message, as its clients
expect them.

Clients branch on ``error_code`` (confluent-kafka's ``SchemaRegistryError.error_code``, the
Java client's ``RestClientException.getErrorCode()``), and some show the message to users,
so codes and message formats are Confluent's own (its ``rest.exceptions.Errors``).
"""

from __future__ import annotations

import json

VERSION_RANGE = 'Allowed values are between [1, 2^31-1] and the string "latest"'
COMPATIBILITY_LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD",
                        "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE")
MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")


class RegistryError(Exception):
    """One REST error: ``status`` (HTTP), ``code`` (Confluent's ``error_code``), message."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    def body(self) -> bytes:
        return json.dumps({"error_code": self.code, "message": self.message}).encode()


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(404, 40401, f"Subject '{subject}' not found.")


def version_not_found(version: object) -> RegistryError:
    return RegistryError(404, 40402, f"Version {version} not found.")


def schema_not_found(schema_id: object = None) -> RegistryError:
    return RegistryError(404, 40403, "Schema not found" if schema_id is None
                         else f"Schema {schema_id} not found")


def subject_soft_deleted(subject: str) -> RegistryError:
    return RegistryError(404, 40404, f"Subject '{subject}' was soft deleted."
                                     "Set permanent=true to delete permanently")


def subject_not_soft_deleted(subject: str) -> RegistryError:
    return RegistryError(404, 40405, f"Subject '{subject}' was not deleted first before "
                                     "being permanently deleted")


def version_soft_deleted(subject: str, version: int) -> RegistryError:
    return RegistryError(404, 40406, f"Subject '{subject}' Version {version} was soft "
                                     "deleted.Set permanent=true to delete permanently")


def version_not_soft_deleted(subject: str, version: int) -> RegistryError:
    return RegistryError(404, 40407, f"Subject '{subject}' Version {version} was not deleted "
                                     "first before being permanently deleted")


def subject_compatibility_not_configured(subject: str) -> RegistryError:
    return RegistryError(404, 40408, f"Subject '{subject}' does not have subject-level "
                                     "compatibility configured")


def subject_mode_not_configured(subject: str) -> RegistryError:
    return RegistryError(404, 40409, f"Subject '{subject}' does not have subject-level mode "
                                     "configured")


def incompatible(subject: str, details: list[str]) -> RegistryError:
    return RegistryError(409, 40901, "Schema being registered is incompatible with an earlier "
                                     f"schema for subject \"{subject}\", details: "
                                     f"[{', '.join(details)}]")


def invalid_schema(why: str) -> RegistryError:
    return RegistryError(422, 42201, f"Invalid schema {why}")


def invalid_version(version: object) -> RegistryError:
    return RegistryError(422, 42202, f"The specified version '{version}' is not a valid "
                                     f"version id. {VERSION_RANGE}")


def invalid_compatibility_level() -> RegistryError:
    return RegistryError(422, 42203, "Invalid compatibility level. Valid values are none, "
                                     "backward, forward, full, backward_transitive, "
                                     "forward_transitive, and full_transitive")


def invalid_mode(mode: object) -> RegistryError:
    return RegistryError(422, 42204, f"Invalid mode {mode!r}. Valid values are "
                                     f"{', '.join(MODES)}")


def not_permitted(why: str) -> RegistryError:
    return RegistryError(422, 42205, why)


def reference_exists(why: str) -> RegistryError:
    return RegistryError(422, 42206, why)


def id_does_not_match(why: str) -> RegistryError:
    return RegistryError(422, 42207, why)


def invalid_subject(subject: object) -> RegistryError:
    return RegistryError(422, 42208, f"The specified subject '{subject}' is not valid.")


def schema_too_large(size: int, limit: int) -> RegistryError:
    return RegistryError(422, 42209, f"Schema of {size} bytes exceeds the limit of "
                                     f"{limit} bytes")


def bad_request(why: str) -> RegistryError:
    """A body that is not JSON or lacks a field (Confluent answers 400 / 50005 for it)."""
    return RegistryError(400, 400, why)


def store_error(why: str) -> RegistryError:
    return RegistryError(500, 50001, f"Error in the backend datastore: {why}")


def timeout(why: str) -> RegistryError:
    return RegistryError(500, 50002, why)


def unauthorized() -> RegistryError:
    return RegistryError(401, 40101, "Unauthorized: a valid token is required "
                                     "(HTTP Basic with the token as password, or Bearer)")
