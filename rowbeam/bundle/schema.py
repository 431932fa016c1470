"""JSON Schema validation of rowbeam documents, with one-line error messages."""
from __future__ import annotations

import json
import math
import re
from functools import lru_cache
from pathlib import Path

import jsonschema
from referencing import Registry, Resource

from rowbeam.util.errors import RowbeamError

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
    "rowbeam/command_track@1": "command_track.schema.json",
}
# written by people: integers must be JSON integers
USER_SCHEMAS = ("rowbeam/rig@1", "rowbeam/ontology@1", "rowbeam/dataset@1", "rowbeam/command_track@1")
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
        raise RowbeamError(f"{source}: {what} {_non_finite_where(data, str(exc)[:40])}; only finite numbers are "
                           "allowed") from None
    except RecursionError:
        raise RowbeamError(f"{source}: {what} is nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as exc:              # JSONDecodeError, UnicodeDecodeError, an integer of > 4300 digits
        raise RowbeamError(f"{source}: {what} is not valid JSON ({str(exc)[:200]})") from None
    problem = document_problem(document)
    if problem:
        raise RowbeamError(f"{source}: {what}: {problem}")
    return document


def _non_finite_where(data, literal: str) -> str:
    """'holds the number NaN at sensors[0].lens.D[1]': where the first non-finite number is (parsed leniently,
    NaN/Infinity/overflowing literals as floats); without the place when the text does not parse that way."""
    try:
        problem = document_problem(json.loads(data))
    except (ValueError, RecursionError):
        problem = None
    where = problem.split(": ")[0] if problem else None
    return f"holds the number {literal} at {where}" if where else f"holds the number {literal}"


def _clean(node, depth: int, max_depth: int) -> bool:
    """True when container `node` (at `depth` enclosing containers) holds only finite floats and nests at most
    max_depth levels (recursion stops at max_depth). False: not certainly clean (plain types only)."""
    if depth >= max_depth:
        return False
    for v in (node.values() if type(node) is dict else node):
        t = type(v)
        if t is float:
            if v - v != 0.0:                  # inf - inf and nan - nan are nan
                return False
        elif t is dict or t is list or t is tuple:
            if not _clean(v, depth + 1, max_depth):
                return False
        elif t not in (str, int, bool) and v is not None:
            return False
    return True


def document_problem(document, max_depth: int = MAX_JSON_DEPTH) -> str | None:
    """'path: problem' for the first non-finite number or nesting deeper than max_depth; None when clean.
    Iterative, so any depth is safe to inspect (a fast recursive pass first, bounded by max_depth)."""
    if type(document) in (dict, list, tuple) and _clean(document, 0, max_depth):
        return None
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
    schema = _schemas()[schema_id]        # shipped schemas are meta-validated in tests (check_schema costs ~1 s)
    cls = _StrictIntegers if schema_id in USER_SCHEMAS else jsonschema.Draft202012Validator
    return cls(schema, registry=_registry())


def json_path(error: jsonschema.ValidationError) -> str:
    out = ""
    for part in error.absolute_path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def schema_errors(document, schema_id: str) -> list[str]:
    """All violations as 'path: message' strings, deepest (most specific) first. A non-finite number
    or nesting beyond MAX_JSON_DEPTH is the only violation reported (no schema admits them).

    Large homogeneous arrays (the object table, object_labels.objects) take a fast path first
    (`fast_valid`): the document without them goes through jsonschema and each item through a
    compiled item check; only when either finds a problem does the whole document go through
    jsonschema, so the messages are always jsonschema's."""
    problem = document_problem(document)
    if problem:
        return [problem]
    if fast_valid(document, schema_id):
        return []
    errors = sorted(validator(schema_id).iter_errors(document),
                    key=lambda e: (-len(e.absolute_path), json_path(e)))
    return [f"{json_path(e)}: {_message(e)}"[:300] for e in errors]


# ---- fast path for large homogeneous arrays -------------------------------------------------------------
# A compiled item check is a predicate equal to jsonschema's verdict on the item schema (tested against
# jsonschema on valid and planted-invalid tables in tests/bundle/test_schema_fast.py). It exists only for item
# schemas built from the keywords below; anything else (a $ref, a format, ...) is left to jsonschema.

FAST_MIN_ITEMS = 16           # shorter arrays are validated by jsonschema with the rest of the document
_IGNORED = {"description", "title", "$comment", "examples", "default"}
_APPLICATORS = {"allOf", "anyOf", "oneOf", "if", "then", "else", "not"}
_UNSAFE = {"$ref", "$dynamicRef", "patternProperties", "unevaluatedProperties", "dependentSchemas",
           "additionalProperties", "properties", "unevaluatedItems"}


def _type_test(name: str, strict_int: bool):
    if name == "integer":
        if strict_int:
            return lambda x: type(x) is int
        return lambda x: type(x) is int or (type(x) is float and x.is_integer())
    return {"number": lambda x: type(x) in (int, float), "string": lambda x: type(x) is str,
            "object": lambda x: type(x) is dict, "array": lambda x: type(x) is list,
            "boolean": lambda x: type(x) is bool, "null": lambda x: x is None}.get(name)


def _literal(v) -> bool:
    return v is None or type(v) in (str, bool)


def compile_check(schema, strict_int: bool = False):
    """A predicate item -> bool equal to jsonschema Draft 2020-12 validity for `schema`, or None when the
    schema uses a keyword this compiler does not handle (then no fast path)."""
    if schema is True:
        return lambda x: True
    if schema is False:
        return lambda x: False
    if not isinstance(schema, dict):
        return None
    tests = []
    for key, value in schema.items():
        if key in _IGNORED:
            continue
        build = _KEYWORDS.get(key)
        test = None if build is None else build(key, value, schema, strict_int)
        if test is None:
            return None
        tests.append(test)
    return _all_of(tuple(tests))


def _kw_type(key, value, schema, strict_int):
    names = [value] if isinstance(value, str) else value
    fs = [_type_test(n, strict_int) for n in names]
    if not isinstance(names, list) or any(f is None for f in fs):
        return None
    return fs[0] if len(fs) == 1 else (lambda x, fs=fs: any(f(x) for f in fs))


def _kw_enum(key, value, schema, strict_int):
    if not isinstance(value, list) or not all(_literal(v) for v in value):
        return None
    return lambda x, vs=value: any(type(x) is type(v) and x == v for v in vs)


def _kw_const(key, value, schema, strict_int):
    if not _literal(value):
        return None
    return lambda x, v=value: type(x) is type(v) and x == v


_BOUNDS = {"minimum": lambda x, b: x >= b, "maximum": lambda x, b: x <= b,
           "exclusiveMinimum": lambda x, b: x > b, "exclusiveMaximum": lambda x, b: x < b}


def _kw_bound(key, value, schema, strict_int):
    if type(value) not in (int, float):
        return None
    return lambda x, op=_BOUNDS[key], b=value: type(x) not in (int, float) or op(x, b)


def _kw_length(key, value, schema, strict_int):
    if type(value) is not int:
        return None
    kind = list if key.endswith("Items") else str
    op = (lambda n, b: n >= b) if key.startswith("min") else (lambda n, b: n <= b)
    return lambda x, kind=kind, op=op, b=value: type(x) is not kind or op(len(x), b)


def _kw_pattern(key, value, schema, strict_int):
    rx = re.compile(value)
    return lambda x, rx=rx: type(x) is not str or rx.search(x) is not None


def _kw_items(key, value, schema, strict_int):
    f = compile_check(value, strict_int)
    if f is None:
        return None
    if isinstance(value, dict) and value.keys() == {"type"} and value["type"] in ("number", "string"):
        kinds = (int, float) if value["type"] == "number" else (str,)     # the common leaf: a type only
        return lambda x, kinds=kinds: type(x) is not list or all(type(i) in kinds for i in x)
    return lambda x, f=f: type(x) is not list or all(map(f, x))


def _kw_required(key, value, schema, strict_int):
    return lambda x, r=frozenset(value): type(x) is not dict or r.issubset(x)


def _kw_properties(key, value, schema, strict_int):
    props = {k: compile_check(v, strict_int) for k, v in value.items()}
    if any(f is None for f in props.values()):
        return None
    return _properties(tuple(props.items()))


def _kw_additional(key, value, schema, strict_int):
    if value is not False:
        return None
    known = frozenset(schema.get("properties", {}))
    return lambda x, known=known: type(x) is not dict or known.issuperset(x)


def _kw_combination(key, value, schema, strict_int):
    fs = [compile_check(v, strict_int) for v in value]
    if any(f is None for f in fs):
        return None
    if key == "oneOf":
        return lambda x, fs=fs: sum(1 for f in fs if f(x)) == 1
    return lambda x, fs=fs: any(f(x) for f in fs)


# keyword -> builder(keyword, value, the whole schema, strict_int) -> predicate, or None when not compilable
_KEYWORDS = {"type": _kw_type, "enum": _kw_enum, "const": _kw_const, "pattern": _kw_pattern, "items": _kw_items,
             "required": _kw_required, "properties": _kw_properties, "additionalProperties": _kw_additional,
             **dict.fromkeys(_BOUNDS, _kw_bound),
             **dict.fromkeys(("minItems", "maxItems", "minLength", "maxLength"), _kw_length),
             **dict.fromkeys(("oneOf", "anyOf"), _kw_combination)}


def _properties(items: tuple):
    def check(x):
        if type(x) is not dict:
            return True
        for k, f in items:
            if k in x and not f(x[k]):
                return False
        return True
    return check


def _all_of(tests: tuple):
    if not tests:
        return lambda x: True
    if len(tests) == 1:
        return tests[0]
    if len(tests) == 2:
        t0, t1 = tests
        return lambda x: t0(x) and t1(x)

    def check(x):
        for t in tests:
            if not t(x):
                return False
        return True
    return check


def _touches(schema, name: str) -> bool:
    """Whether an applicator subschema (same instance) could look at property `name` of the instance."""
    if not isinstance(schema, dict):
        return isinstance(schema, list) and any(_touches(s, name) for s in schema)
    if any(k in schema for k in _UNSAFE - {"properties", "additionalProperties"}):
        return True
    if schema.get("additionalProperties", True) is not True or name in schema.get("properties", {}):
        return True
    return any(_touches(schema[k], name) for k in _APPLICATORS if k in schema)


def _fast_paths(schema, strict_int: bool, prefix=()) -> list:
    """[(property path, item check)] of the arrays in `schema` reached through `properties` only whose schema
    is {"type": "array", "items": compilable} and that no applicator on the way could inspect."""
    out = []
    if not isinstance(schema, dict) or any(k in schema for k in ("patternProperties", "unevaluatedProperties",
                                                                  "dependentSchemas", "$ref", "$dynamicRef")):
        return out
    for name, sub in schema.get("properties", {}).items():
        if any(_touches(schema[k], name) for k in _APPLICATORS if k in schema):
            continue
        if isinstance(sub, dict) and sub.get("type") == "array" and set(sub) - _IGNORED == {"type", "items"}:
            f = compile_check(sub["items"], strict_int)
            if f is not None:
                out.append(((*prefix, name), f))
        elif isinstance(sub, dict) and sub.get("type") == "object":
            out += _fast_paths(sub, strict_int, (*prefix, name))
    return out


@lru_cache(maxsize=None)
def _compiled_paths(schema_id: str) -> tuple:
    return tuple(_fast_paths(_schemas()[schema_id], schema_id in USER_SCHEMAS))


def fast_valid(document, schema_id: str) -> bool:
    """True when `document` is certainly valid: its large fast-path arrays pass their compiled item checks and
    the rest of it (those arrays replaced by []) passes jsonschema. False means: ask jsonschema."""
    stripped, items = document, []
    for path, check in _compiled_paths(schema_id):
        parents, node = [], stripped
        for key in path[:-1]:
            if not isinstance(node, dict) or not isinstance(node.get(key), dict):
                node = None
                break
            parents.append(node)
            node = node[key]
        if not isinstance(node, dict) or not isinstance(node.get(path[-1]), list) or \
                len(node[path[-1]]) < FAST_MIN_ITEMS:
            continue
        items.append((node[path[-1]], check))
        copy = {**node, path[-1]: []}                  # shallow copies along the path; the document is untouched
        for parent, key in zip(reversed(parents), reversed(path[:-1]), strict=True):
            copy = {**parent, key: copy}
        stripped = copy
    if not items:
        return False
    return all(check(i) for table, check in items for i in table) and validator(schema_id).is_valid(stripped)


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
