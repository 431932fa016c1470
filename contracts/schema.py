"""JSON Schema validation of rowbeam documents, with one-line error messages."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import jsonschema
from referencing import Registry, Resource

SCHEMA_DIR = Path(__file__).parent / "schemas"
SCHEMA_FILES = {
    "rowbeam/rig@1": "rig.schema.json",
    "rowbeam/sample@1": "sample.schema.json",
    "rowbeam/ontology@1": "ontology.schema.json",
    "rowbeam/bundle@1": "bundle.schema.json",
    "rowbeam/qa_report@1": "qa_report.schema.json",
    "rowbeam/flow@1": "flow.schema.json",
    "rowbeam/adapter_sidecar@1": "adapter_sidecar.schema.json",
}


@lru_cache(maxsize=None)
def _schemas() -> dict:
    return {sid: json.loads((SCHEMA_DIR / name).read_text()) for sid, name in SCHEMA_FILES.items()}


@lru_cache(maxsize=None)
def _registry() -> Registry:
    """Every rowbeam schema under its $id, so one schema can $ref another's definitions."""
    return Registry().with_resources((s["$id"], Resource.from_contents(s)) for s in _schemas().values())


@lru_cache(maxsize=None)
def validator(schema_id: str) -> jsonschema.Draft202012Validator:
    schema = _schemas()[schema_id]
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, registry=_registry())


def json_path(error: jsonschema.ValidationError) -> str:
    out = ""
    for part in error.absolute_path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def schema_errors(document, schema_id: str) -> list[str]:
    """All violations as 'path: message' strings, deepest (most specific) first."""
    errors = sorted(validator(schema_id).iter_errors(document),
                    key=lambda e: (-len(e.absolute_path), json_path(e)))
    return [f"{json_path(e)}: {_message(e)}" for e in errors]


def _message(e: jsonschema.ValidationError) -> str:
    if e.validator == "additionalProperties":
        extra = sorted(set(e.instance) - set(e.schema.get("properties", {})))
        return f"unknown field(s) {', '.join(map(repr, extra))}"
    if e.validator == "required":
        return e.message.replace("is a required property", "is required")
    return e.message
