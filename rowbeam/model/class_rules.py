"""Class rules: the class tags a scene already carries -> ontology classes (no bpy).

An ontology's optional `class_rules` list maps what objects already hold -- a custom property
(`category_id`, `category`, `class`, ...), membership of a collection (directly or through nested
collections), or a name pattern -- to ontology classes. An object's own `rowbeam_class` comes first;
then every rule is tried, and two rules giving one object two different classes is an error.

Rule forms (JSON objects, one key set each):
  {"preset": "category_id"}                         the synthetic-data convention: integer custom property
                                                    `category_id` = ontology class id
  {"preset": "collection_names"}                    a collection name (or an enclosing one's) = ontology tag/class name
  {"property": P, "value": "class_id"}              custom property P holds an ontology class id
  {"property": P, "value": "tag"}                   custom property P holds an ontology tag or class name
  {"property": P, "equals": V, "class": C}          custom property P equal to V (compared as text) -> class C
  {"collection": GLOB, "class": C}                  member of a collection whose name matches GLOB -> class C
  {"collection": GLOB, "value": "tag"}              the matching collection's name is an ontology tag or class name
  {"name": GLOB, "class": C}                        object name matching GLOB (fnmatch, case-sensitive) -> class C
C is an ontology class name or tag; a C the ontology does not define is refused when the ontology loads.
"""
from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

from rowbeam.util.errors import RowbeamError

PRESETS = {
    "category_id": ({"property": "category_id", "value": "class_id"},),
    "collection_names": ({"collection": "*", "value": "tag"},),
}
_FORMS = ({"preset"}, {"property", "value"}, {"property", "equals", "class"}, {"collection", "class"},
          {"collection", "value"}, {"name", "class"})


@dataclass(frozen=True)
class ObjectTags:
    """What an object carries: its name, custom properties {name: value}, and the names of the collections it
    is in (directly, then every enclosing collection)."""
    name: str
    properties: dict
    collections: tuple = ()


@dataclass(frozen=True)
class ClassRule:
    """One parsed rule: kind property | collection | name; key = property name or glob; value = class_id | tag
    (the value found is looked up) or None with class_id fixed; text = how the manifest names it."""
    kind: str
    key: str
    value: str | None
    equals: str | None
    class_id: int | None
    text: str


def parse_class_rules(rules, resolve, source: str) -> tuple[ClassRule, ...]:
    """ClassRules of an ontology's `class_rules` list; `resolve(name_or_tag) -> class id or None`.
    RowbeamError (one line) for an unknown preset, a malformed rule or a class the ontology lacks."""
    out = []
    for i, raw in enumerate(rules or ()):
        where = f"{source}: class_rules[{i}]"
        if not isinstance(raw, dict) or set(raw) not in _FORMS:
            raise RowbeamError(f"{where}: expected one of {[sorted(f) for f in _FORMS]}, got {raw!r}")
        if "preset" in raw:
            if raw["preset"] not in PRESETS:
                raise RowbeamError(f"{where}: unknown preset {raw['preset']!r} (known: {', '.join(PRESETS)})")
            out += [_rule(r, resolve, f"{where} (preset {raw['preset']})") for r in PRESETS[raw["preset"]]]
        else:
            out.append(_rule(raw, resolve, where))
    return tuple(out)


def _rule(raw: dict, resolve, where: str) -> ClassRule:
    kind = next(k for k in ("property", "collection", "name") if k in raw)
    key = raw[kind]
    if not isinstance(key, str) or not key:
        raise RowbeamError(f"{where}: {kind} must be a non-empty string")
    value = raw.get("value")
    if value is not None and value not in (("class_id", "tag") if kind == "property" else ("tag",)):
        raise RowbeamError(f"{where}: value {value!r} must be {'class_id or tag' if kind == 'property' else 'tag'}")
    class_id = None
    if "class" in raw:
        class_id = resolve(str(raw["class"]))
        if class_id is None:
            raise RowbeamError(f"{where}: class {raw['class']!r} is not a class name or tag of the ontology")
    equals = str(raw["equals"]) if "equals" in raw else None
    text = f"{kind} {key}" + (f" = {equals}" if equals is not None else "") + (
        f" -> {raw['class']}" if "class" in raw else f" ({value})")
    return ClassRule(kind, key, value, equals, class_id, text)


def _rule_class(rule: ClassRule, obj: ObjectTags, resolve, class_ids) -> tuple[int | None, str | None]:
    """(class id or None, the value that matched) of one rule for one object."""
    if rule.kind == "name":
        return (rule.class_id, obj.name) if fnmatchcase(obj.name, rule.key) else (None, None)
    if rule.kind == "collection":
        for c in obj.collections:
            if fnmatchcase(c, rule.key):
                cid = rule.class_id if rule.value is None else resolve(c)
                if cid is not None:
                    return cid, c
        return None, None
    if rule.key not in obj.properties:
        return None, None
    raw = obj.properties[rule.key]
    text = _text(raw)
    if rule.equals is not None:
        return (rule.class_id, text) if text == rule.equals else (None, None)
    if rule.value == "class_id":
        cid = _integer(raw)
        return (cid if cid in class_ids else None), text
    return resolve(text), text


def _text(raw) -> str:
    if isinstance(raw, float) and raw.is_integer():
        return str(int(raw))
    return str(raw).strip()


def _integer(raw) -> int | None:
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw
    if isinstance(raw, float) and raw.is_integer():
        return int(raw)
    try:
        return int(str(raw).strip())
    except ValueError:
        return None


def classify(rules, obj: ObjectTags, resolve, class_ids) -> tuple[int | None, str | None]:
    """(class id, source text) the rules give `obj`, (None, None) when none does, (None, why) when a rule's
    property is present but maps to no class. RowbeamError (one line) when two rules give two classes."""
    found, unknown = [], None
    for rule in rules:
        cid, matched = _rule_class(rule, obj, resolve, class_ids)
        if cid is not None:
            found.append((cid, f"class_rules: {rule.text}: {matched!r}"))
        elif matched is not None and unknown is None:
            unknown = f"class_rules: {rule.text}: {matched!r} is no class of the ontology"
    ids = {cid for cid, _ in found}
    if len(ids) > 1:
        raise RowbeamError(f"object {obj.name!r}: class rules disagree: "
                           + "; ".join(text for _, text in found) + " (one object gets one class)")
    if found:
        return found[0]
    return None, unknown
