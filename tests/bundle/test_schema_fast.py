"""The schema fast path (rowbeam.bundle.schema.fast_valid / compile_check) gives jsonschema's verdict exactly: every
compiled item check against jsonschema on valid items and on every planted fault (each field replaced by a value
of every JSON kind, removed, an unknown field added, list lengths changed), and schema_errors with the fast path
against plain jsonschema on a real camera manifest with object labels, valid and with planted-invalid tables."""
from __future__ import annotations

import copy
import json

import jsonschema
import pytest

from rowbeam.bundle import schema as S
from rowbeam.blender.scenes import object_scenes

# one value of every JSON kind and edge: wrong types, bool-for-int, integral float, huge, negative, empty, nested
PROBES = [None, True, False, 0, 1, -1, 2, 1.0, 0.5, -0.5, 2 ** 64, "", "x", "0" * 64, "12345",
          "assets/meshes/" + "a" * 64 + ".ply", "object", "static", "m", [], [1, 2, 3, 4], [[0.0] * 4] * 4, {}]


def _mutants(item):
    """(where, mutated copy) for every field of `item` (nested): each probe value, removal, an extra key,
    one element more and one fewer in every list."""
    def walk(node, path):
        if isinstance(node, dict):
            yield path + ("+extra",), lambda d: d.__setitem__("unknown_field", 1), path
            for k in list(node):
                yield path + (k, "-del"), lambda d, k=k: d.pop(k), path
                for i, probe in enumerate(PROBES):
                    yield path + (k, i), lambda d, k=k, p=probe: d.__setitem__(k, copy.deepcopy(p)), path
                yield from walk(node[k], path + (k,))
        elif isinstance(node, list):
            yield path + ("+item",), lambda d: d.append(copy.deepcopy(d[0]) if d else 0), path
            if node:
                yield path + ("-item",), lambda d: d.pop(), path
            for j, v in enumerate(node[:2]):
                for i, probe in enumerate(PROBES):
                    yield path + (j, i), lambda d, j=j, p=probe: d.__setitem__(j, copy.deepcopy(p)), path
                yield from walk(v, path + (j,))

    for where, edit, parent in walk(item, ()):
        m = copy.deepcopy(item)
        node = m
        for key in parent:
            node = node[key]
        edit(node)
        yield where, m


def _item_schemas(schema_id):
    doc = S._schemas()[schema_id]
    out = {}
    for path, check in S._compiled_paths(schema_id):
        node = doc
        for key in path:
            node = node["properties"][key]
        out[path] = (node["items"], check)
    return out


@pytest.fixture(scope="module")
def manifest(exports):
    e = exports("object_calibration", object_scenes.object_calibration, first_event=1, count=1)
    return json.loads((e.event / "manifest.json").read_text())


def test_every_shipped_schema_is_a_valid_2020_12_schema():
    for sid in S.SCHEMA_FILES:
        jsonschema.Draft202012Validator.check_schema(S._schemas()[sid])


def test_compiled_item_checks_equal_jsonschema_on_planted_faults(manifest):
    items = _item_schemas("rowbeam/sample@1")
    assert {("objects",), ("object_labels", "objects")} <= set(items)
    tables = {("objects",): manifest["objects"], ("object_labels", "objects"): manifest["object_labels"]["objects"],
              ("ontology", "classes"): manifest["ontology"]["classes"]}
    compared = invalid = 0
    for path, table in tables.items():
        item_schema, check = items[path]
        reference = jsonschema.Draft202012Validator(item_schema)
        assert table and all(check(x) for x in table) and all(reference.is_valid(x) for x in table)
        for where, m in _mutants(table[0]):
            want = reference.is_valid(m)
            assert check(m) == want, (path, where, m)
            compared += 1
            invalid += not want
    assert compared > 1500 and invalid > compared // 2, (compared, invalid)   # faults really planted: most invalid


def test_compiled_checks_keyword_semantics():
    """Edge cases where JSON Schema differs from Python: bool is not an integer, 1.0 is an integer (not under
    the strict rig integers), oneOf means exactly one, keywords ignore other types."""
    cases = [({"type": "integer"}, [1, 1.0, True, 1.5, "1"]), ({"type": ["integer", "null"], "minimum": 0}, [None, -1, 0, False]),
             ({"oneOf": [{"type": "number"}, {"type": "integer"}]}, [1, 1.5]), ({"enum": ["a", None]}, ["a", None, 0, False]),
             ({"const": True}, [True, 1, 1.0]), ({"pattern": "^a"}, ["ab", "ba", 3]), ({"minItems": 2}, [[1], [1, 2], "x"]),
             ({"exclusiveMaximum": 1}, [1, 0.99, True]), ({"maxLength": 1}, ["ab", "a", 12]),
             ({"anyOf": [{"type": "string"}, {"minimum": 3}]}, ["s", 2, 4, None])]
    for schema, values in cases:
        check, ref = S.compile_check(schema), jsonschema.Draft202012Validator(schema)
        for v in values:
            assert check(v) == ref.is_valid(v), (schema, v)
    assert S.compile_check({"type": "integer"}, strict_int=True)(1.0) is False
    assert S.compile_check({"$ref": "#/x"}) is None and S.compile_check({"format": "uri"}) is None


def _reference_errors(doc, schema_id):
    errors = sorted(S.validator(schema_id).iter_errors(doc), key=lambda e: (-len(e.absolute_path), S.json_path(e)))
    return [f"{S.json_path(e)}: {S._message(e)}"[:300] for e in errors]


def test_schema_errors_with_fast_path_equal_jsonschema(manifest, monkeypatch):
    monkeypatch.setattr(S, "FAST_MIN_ITEMS", 1)        # the calibration scene has few objects: force the fast path
    sid = "rowbeam/sample@1"
    assert S.fast_valid(manifest, sid) and S.schema_errors(manifest, sid) == [] == _reference_errors(manifest, sid)
    faults = [("objects", 0, "render_index", 0), ("objects", -1, "motion", "spinning"),
              ("object_labels", "objects", 0, "px_count_all", 0), ("object_labels", "objects", -1, "id", "12a"),
              ("object_labels", "objects", 0, "bbox_modal", [1, 2, 3]), ("object_labels", "objects", 0, "asset", {}),
              ("sensor", "type", "camera"), ("event", "exposure_ns", -5)]
    for *path, key, value in faults:
        doc = copy.deepcopy(manifest)
        node = doc
        for k in path:
            node = node[k]
        node[key] = value
        before = json.dumps(doc, sort_keys=True)
        got = S.schema_errors(doc, sid)
        assert got and got == _reference_errors(doc, sid), (path, key)
        assert not S.fast_valid(doc, sid) and json.dumps(doc, sort_keys=True) == before    # nothing changed in place
