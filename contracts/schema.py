"""JSON Schema validation of rowbeam documents, with one-line error messages."""
from __future__ import annotations

import json
import math
import sys
from functools import lru_cache
from pathlib import Path

import jsonschema
from referencing import Registry, Resource

from .errors import RowbeamError

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
    "rowbeam/state_log@1": "state_log.schema.json",
    "rowbeam/associations@1": "associations.schema.json",
    "rowbeam/report@1": "report.schema.json",
    "rowbeam/dataset@1": "dataset.schema.json",
    "rowbeam/plan@1": "plan.schema.json",
    "rowbeam/dataset_manifest@1": "dataset_manifest.schema.json",
}
USER_SCHEMAS = ("rowbeam/rig@1", "rowbeam/ontology@1", "rowbeam/dataset@1")   # written by people: integers must be JSON integers
MAX_JSON_DEPTH = 64                  # nesting levels of any rowbeam document
MAX_USER_JSON_BYTES = 1 << 20        # a rig or ontology file (or a rig stored in a .blend), bytes

_StrictIntegers = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _checker, x: isinstance(x, int) and not isinstance(x, bool)))


class _NonFinite(ValueError):
    pass


def _refuse_non_finite(text: str):
    raise _NonFinite(text)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):          # 1e400 overflows to inf
        raise _NonFinite(text)
    return value


def loads_user_json(data, source: str, what: str):
    """Parse JSON text (str or bytes) a user gave: finite numbers only (NaN, Infinity and literals that
    overflow a float are refused), nesting at most MAX_JSON_DEPTH. RowbeamError naming `source` otherwise."""
    try:
        document = json.loads(data, parse_constant=_refuse_non_finite, parse_float=_finite_float)
    except _NonFinite as exc:
        raise RowbeamError(f"{source}: {what} holds the number {str(exc)[:40]}; only finite numbers are allowed") \
            from None
    except RecursionError:
        raise RowbeamError(f"{source}: {what} is nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as exc:              # JSONDecodeError, UnicodeDecodeError, an integer of > 4300 digits
        raise RowbeamError(f"{source}: {what} is not valid JSON ({str(exc)[:200]})") from None
    problem = document_problem(document)
    if problem:
        raise RowbeamError(f"{source}: {what}: {problem}")
    return document


def document_problem(document, max_depth: int = MAX_JSON_DEPTH) -> str | None:
    """'path: problem' for the first non-finite number or nesting deeper than max_depth; None when clean.
    Iterative, so any depth is safe to inspect."""
    stack = [(document, None, 0)]
    while stack:
        node, where, depth = stack.pop()            # depth: containers enclosing node
        if depth >= max_depth and isinstance(node, (dict, list, tuple)):
            return f"nested deeper than {max_depth} levels"
        if isinstance(node, float) and not math.isfinite(node):
            return f"{_path_of(where)}: {node!r} is not a finite number"
        if isinstance(node, dict):
            stack.extend((v, (where, k), depth + 1) for k, v in node.items())
        elif isinstance(node, (list, tuple)):
            stack.extend((v, (where, i), depth + 1) for i, v in enumerate(node))
    return None


def _path_of(where) -> str:
    parts = []
    while where is not None:
        where, key = where
        parts.append(key)
    out = ""
    for part in reversed(parts):
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


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
    cls = _StrictIntegers if schema_id in USER_SCHEMAS else jsonschema.Draft202012Validator
    return cls(schema, registry=_registry())


def json_path(error: jsonschema.ValidationError) -> str:
    out = ""
    for part in error.absolute_path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def schema_errors(document, schema_id: str) -> list[str]:
    """All violations as 'path: message' strings, deepest (most specific) first. A non-finite number
    or nesting beyond MAX_JSON_DEPTH is the only violation reported (no schema admits them)."""
    problem = document_problem(document)
    if problem:
        return [problem]
    errors = sorted(validator(schema_id).iter_errors(document),
                    key=lambda e: (-len(e.absolute_path), json_path(e)))
    return [f"{json_path(e)}: {_message(e)}"[:300] for e in errors]


def _message(e: jsonschema.ValidationError) -> str:
    if e.validator == "additionalProperties":
        extra = sorted(set(e.instance) - set(e.schema.get("properties", {})))
        return f"unknown field(s) {', '.join(map(repr, extra))}"
    if e.validator == "required":
        return e.message.replace("is a required property", "is required")
    if e.validator == "pattern" and e.schema.get("description"):
        return f"{_short(e.instance)} is not allowed ({e.schema['description']})"
    if e.validator in ("maxLength", "maxItems"):
        return f"{_short(e.instance)} is longer than {e.validator_value}"
    return e.message


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}...({len(value)} long)"


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
