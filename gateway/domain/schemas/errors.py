"""The registry's errors, with Confluent Schema Registry's HTTP statuses, error codes and messages.

Taken from Confluent's REST API reference (docs.confluent.io, schema-registry/develop/api) and
Karapace's `api/controller.py` and `api/routers/errors.py`, which repeat Confluent's wording."""

from __future__ import annotations

from gateway.errors import GatewayError

LEVELS_TEXT = ("Invalid compatibility level. Valid values are none, backward, forward, full, backward_transitive, "
               "forward_transitive, and full_transitive")


class RegistryError(GatewayError):
    """A refusal as the registry words it: `status` (HTTP), `error_code` (Confluent's), message."""

    def __init__(self, status: int, error_code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(404, 40401, f"Subject '{subject}' not found.")


def version_not_found(version: object) -> RegistryError:
    return RegistryError(404, 40402, f"Version {version} not found.")


def schema_not_found(schema_id: int | None = None) -> RegistryError:
    return RegistryError(404, 40403, "Schema not found" if schema_id is None else f"Schema {schema_id} not found")


def subject_soft_deleted(subject: str) -> RegistryError:
    return RegistryError(404, 40404, f"Subject '{subject}' was soft deleted.Set permanent=true to delete permanently")


def subject_not_soft_deleted(subject: str) -> RegistryError:
    return RegistryError(404, 40405, f"Subject '{subject}' was not deleted first before being permanently deleted")


def version_soft_deleted(subject: str, version: int) -> RegistryError:
    return RegistryError(404, 40406, f"Subject '{subject}' Version {version} was soft deleted.Set permanent=true "
                         "to delete permanently")


def version_not_soft_deleted(subject: str, version: int) -> RegistryError:
    return RegistryError(404, 40407, f"Subject '{subject}' Version {version} was not deleted first before being "
                         "permanently deleted")


def no_subject_config(subject: str) -> RegistryError:
    return RegistryError(404, 40408, f"Subject '{subject}' does not have subject-level compatibility configured")


def no_subject_mode(subject: str) -> RegistryError:
    return RegistryError(404, 40409, f"Subject '{subject}' does not have subject-level mode configured")


def incompatible(subject: str, details: list[str]) -> RegistryError:
    return RegistryError(409, 409, f'Schema being registered is incompatible with an earlier schema for subject '
                         f'"{subject}", details: [{", ".join(details)}]')


def invalid_schema(message: str) -> RegistryError:
    return RegistryError(422, 42201, message)


def invalid_version(version: object) -> RegistryError:
    return RegistryError(422, 42202, f"The specified version '{version}' is not a valid version id. Allowed values "
                         'are between [1, 2^31-1] and the string "latest"')


def invalid_level() -> RegistryError:
    return RegistryError(422, 42203, LEVELS_TEXT)


def invalid_mode(mode: object) -> RegistryError:
    return RegistryError(422, 42204, f"Invalid mode {mode}. Valid values are READWRITE, READONLY and IMPORT")


def not_permitted(message: str) -> RegistryError:
    return RegistryError(422, 42205, message)


def reference_exists(subject: str, version: int) -> RegistryError:
    return RegistryError(422, 42206, "One or more references exist to the schema "
                         f"{{magic=1,keytype=SCHEMA,subject={subject},version={version}}}.")


def bad_request(message: str) -> RegistryError:
    return RegistryError(400, 400, message)


def unprocessable(message: str) -> RegistryError:
    return RegistryError(422, 422, message)
