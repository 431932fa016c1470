"""Versioned ontologies (`rowbeam/ontology@1`): object tag -> semantic class id.

Class 0 is background (no surface); 2^32-1 is void (a surface whose object has no known tag).
`class_rules` (rowbeam.model.class_rules) map the class tags a scene already carries to classes.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from rowbeam.model.class_rules import ClassRule, parse_class_rules
from rowbeam.util.errors import RowbeamError
from rowbeam.bundle.files import open_regular, regular_file
from rowbeam.bundle.schema import MAX_USER_JSON_BYTES, loads_user_json, schema_errors

BACKGROUND_ID = 0
VOID_ID = 2**32 - 1
DEFAULT_ONTOLOGY = Path(__file__).parent / "ontologies" / "street.json"


@dataclass(frozen=True)
class Ontology:
    name: str
    version: str
    sha256: str
    classes: tuple  # ((id, name, tags), ...)
    tag_to_id: dict = field(repr=False)
    class_rules: tuple[ClassRule, ...] = ()

    def class_of(self, tag: str | None) -> int:
        """Class id of an object tag; VOID_ID when the tag is missing or unknown."""
        if not tag:
            return VOID_ID
        return self.tag_to_id.get(tag.strip().lower(), VOID_ID)

    def resolve(self, name_or_tag: str) -> int | None:
        """Class id of a tag or class name (case-insensitive), None when the ontology has neither."""
        key = str(name_or_tag).strip().lower()
        if key in self.tag_to_id:
            return self.tag_to_id[key]
        return next((i for i, n, _ in self.classes if n == key), None)

    def class_name(self, class_id: int) -> str | None:
        return next((n for i, n, _ in self.classes if i == class_id), None)

    @property
    def class_ids(self) -> frozenset:
        return frozenset(i for i, _, _ in self.classes)

    def manifest_entry(self) -> dict:
        return {"name": self.name, "version": self.version, "sha256": self.sha256,
                "background_id": BACKGROUND_ID, "void_id": VOID_ID,
                "classes": [{"id": i, "name": n, "tags": list(t)} for i, n, t in self.classes],
                **({"class_rules": [r.text for r in self.class_rules]} if self.class_rules else {})}


def parse_ontology(raw_bytes: bytes, source: str) -> Ontology:
    doc = loads_user_json(raw_bytes, source, "ontology")
    errors = schema_errors(doc, "rowbeam/ontology@1")
    if errors:
        raise RowbeamError(f"{source}: invalid ontology: {errors[0]}")
    tag_to_id, ids = {}, set()
    for i, c in enumerate(doc["classes"]):
        if c["id"] in ids:
            raise RowbeamError(f"{source}: classes[{i}].id: duplicate class id {c['id']}")
        ids.add(c["id"])
        for tag in c["tags"]:
            key = tag.strip().lower()
            if key in tag_to_id:
                raise RowbeamError(f"{source}: classes[{i}].tags: tag {tag!r} maps to two classes")
            tag_to_id[key] = c["id"]
    classes = tuple((c["id"], c["name"], tuple(c["tags"])) for c in doc["classes"])
    onto = Ontology(doc["name"], doc["version"], hashlib.sha256(raw_bytes).hexdigest(), classes, tag_to_id)
    rules = parse_class_rules(doc.get("class_rules"), onto.resolve, source)
    return Ontology(onto.name, onto.version, onto.sha256, classes, tag_to_id, rules)


def load_ontology(path=None) -> Ontology:
    path = Path(path) if path else DEFAULT_ONTOLOGY
    if regular_file(path).st_size > MAX_USER_JSON_BYTES:     # a FIFO or a folder is refused unopened
        raise RowbeamError(f"{path}: ontology file is larger than {MAX_USER_JSON_BYTES} bytes")
    with open_regular(path) as f:
        return parse_ontology(f.read(MAX_USER_JSON_BYTES + 1), str(path))
