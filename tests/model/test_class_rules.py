"""Class rules (no Blender): the class tags a scene already carries -- custom properties, collections, names --
map to ontology classes; bad rules and disagreeing rules are refused with one line."""
from __future__ import annotations

import json

import pytest

from rowbeam.model.class_rules import ObjectTags, classify
from rowbeam.model.ontology import DEFAULT_ONTOLOGY, parse_ontology
from rowbeam.util.errors import RowbeamError


def _onto(rules):
    doc = json.loads(DEFAULT_ONTOLOGY.read_text())
    doc["class_rules"] = rules
    return parse_ontology(json.dumps(doc).encode(), "onto.json")


def _class(onto, obj):
    return classify(onto.class_rules, obj, onto.resolve, onto.class_ids)


def test_category_id_preset_reads_the_integer_property_as_a_class_id():
    onto = _onto([{"preset": "category_id"}])
    assert _class(onto, ObjectTags("Car.001", {"category_id": 4}))[0] == 4           # vehicle
    assert _class(onto, ObjectTags("Tree", {"category_id": 7.0}))[0] == 7            # float from a UI edit
    assert _class(onto, ObjectTags("Sign", {"category_id": "8"}))[0] == 8
    cid, why = _class(onto, ObjectTags("Thing", {"category_id": 77}))
    assert cid is None and "77" in why and "no class of the ontology" in why
    assert _class(onto, ObjectTags("Plain", {})) == (None, None)
    assert onto.manifest_entry()["class_rules"] == ["property category_id (class_id)"]


def test_collection_names_preset_uses_the_innermost_collection_that_names_a_class():
    onto = _onto([{"preset": "collection_names"}])
    assert _class(onto, ObjectTags("a", {}, ("Parked", "Car", "Street")))[0] == 4   # car tag, via nesting
    assert _class(onto, ObjectTags("b", {}, ("Vegetation",)))[0] == 7                 # class name, any case
    assert _class(onto, ObjectTags("c", {}, ("Props",))) == (None, None)


def test_explicit_property_collection_and_name_rules():
    onto = _onto([{"property": "class", "equals": "auto", "class": "vehicle"},
                  {"property": "category", "value": "tag"},
                  {"collection": "Trees*", "class": "vegetation"},
                  {"name": "Lamp.*", "class": "pole"}])
    assert _class(onto, ObjectTags("x", {"class": "auto"}))[0] == 4
    assert _class(onto, ObjectTags("x", {"category": " Person "}))[0] == 5
    assert _class(onto, ObjectTags("x", {}, ("Trees_big",)))[0] == 7
    assert _class(onto, ObjectTags("Lamp.003", {}))[0] == 6
    assert _class(onto, ObjectTags("lamp.003", {})) == (None, None)                     # names are case-sensitive
    # two rules agreeing is fine
    assert _class(onto, ObjectTags("Lamp.1", {"category": "pole"}))[0] == 6


def test_two_rules_giving_two_classes_is_one_error_line():
    onto = _onto([{"preset": "category_id"}, {"name": "Car*", "class": "vehicle"}])
    with pytest.raises(RowbeamError) as err:
        _class(onto, ObjectTags("Car.007", {"category_id": 7}))
    assert "'Car.007'" in str(err.value) and "disagree" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("rule, fragment", [
    ({"name": "x*", "class": "spaceship"}, "class 'spaceship' is not a class name or tag"),
    ({"preset": "blenderproc2"}, "unknown preset 'blenderproc2'"),
    ({"property": "category_id", "value": "colour"}, "value 'colour'"),
    ({"collection": "C", "value": "class_id"}, "value 'class_id'"),
    ({"name": "", "class": "pole"}, "name must be a non-empty string"),
    ({"name": "x", "class": "pole", "extra": 1}, "expected one of"),
])
def test_bad_rules_are_refused_when_the_ontology_loads(rule, fragment):
    with pytest.raises(RowbeamError) as err:
        _onto([rule])
    assert "class_rules[0]" in str(err.value) and fragment in str(err.value) and "\n" not in str(err.value)


def test_dropped_summary_names_counts_and_reasons():
    from rowbeam.adapters.objects import dropped_summary, refuse_empty

    skipped = [{"reason": "void class", "name": f"o{i}"} for i in range(7)] + [{"reason": "no visible pixel",
                                                                                 "name": "far"}]
    line = dropped_summary(skipped, 10)
    assert line.startswith("dropped 8 of 10 object label(s): 7 void class ('o0', 'o1', 'o2', 'o3', 'o4', ...)")
    assert line.endswith("1 no visible pixel ('far')")
    assert dropped_summary([], 3) == ""
    refuse_empty("coco", 1, skipped, 10)
    with pytest.raises(RowbeamError, match="coco: no annotation to write: dropped 8 of 10"):
        refuse_empty("coco", 0, skipped, 10)
