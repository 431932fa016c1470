"""rowbeam: the `rowbeam` command (export, check, adapt, scenes, schemas).

The checker and adapters (`contracts`) need only numpy, OpenEXR and jsonschema; `export` and
`scenes` need Blender's Python module (`pip install 'rowbeam[blender]'`) or a Blender binary.
"""
