"""JSON Schema validation of rowbeam documents, with one-line error messages."""
from __future__ import annotations

import json
import sys
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
    "rowbeam/event_qa@1": "event_qa.schema.json",
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


def schemas_main(argv: list[str]) -> int:
    """`rowbeam schemas OUT_DIR`: write every published schema as <name>.schema.json (their $refs name each
    other by $id; validate with jsonschema + a referencing.Registry of these files, see the README)."""
    import argparse
    import shutil

    p = argparse.ArgumentParser(prog="rowbeam schemas", description=schemas_main.__doc__.split(":", 1)[1].strip())
    p.add_argument("out", help="folder to write the schema files into (created if missing)")
    args = p.parse_args(argv)
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name in SCHEMA_FILES.values():
            shutil.copyfile(SCHEMA_DIR / name, out / name)
    except OSError as exc:
        print(f"rowbeam schemas: error: {out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    for sid, name in SCHEMA_FILES.items():
        print(f"{sid:<28} {out / name}")
    return 0
