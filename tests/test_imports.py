"""The import graph of `rowbeam/`: no cycles (imports inside functions included), the no-Blender side never
imports `rowbeam.blender` or bpy, and `import rowbeam` stays light. Read with `ast`, nothing imported."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "rowbeam"
BLENDER_SIDE = "rowbeam.blender"                 # the one package that may need Blender's Python module
BLENDER_MODULES = {"bpy", "mathutils", "bmesh", "gpu"}
HEAVY = ("numpy", "rowbeam.report", "rowbeam.check")   # not loaded by `import rowbeam` (names resolve on first use)

# The only imports of `rowbeam.blender` from outside it: the command line's entries for the commands that need
# Blender, imported inside functions when that very command is parsed (`rowbeam export --help` works without bpy).
LAZY_BLENDER_IMPORTS = {
    ("rowbeam.cli.blender_commands", "rowbeam.blender.export.cli"): "`rowbeam export`: its options and its run",
    ("rowbeam.cli.blender_commands", "rowbeam.blender.scenes.build"): "`rowbeam scenes`: its options and its run",
}


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join(parts)] = path
    return mods


def _imported_names(module: str, path: Path) -> set[str]:
    """Every dotted name `module` imports, anywhere in the file (module level, functions, conditionals)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)
    return names


def import_graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """({module: rowbeam modules it imports}, {module: outside top-level names it imports})."""
    mods = _modules()
    edges, outside = {}, {}
    for module, path in mods.items():
        names = _imported_names(module, path)
        inside = set()
        for name in names:
            while name and name not in mods:
                name = name.rpartition(".")[0]
            if name:
                inside.add(name)
        edges[module] = inside - {module}
        outside[module] = {n.split(".")[0] for n in names if not n.startswith("rowbeam")}
    return edges, outside


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_the_graph_reader_sees_imports_inside_functions():
    edges, _ = import_graph()
    lazy = next(iter(LAZY_BLENDER_IMPORTS))
    assert lazy[1] in edges[lazy[0]]                  # imported inside a function
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles():
    edges, _ = import_graph()
    assert _cycles(edges) == []


def test_nothing_outside_the_blender_side_imports_it():
    edges, outside = import_graph()
    upward = {(m, t) for m, targets in edges.items() if not m.startswith(BLENDER_SIDE)
              for t in targets if t.startswith(BLENDER_SIDE)}
    assert upward == set(LAZY_BLENDER_IMPORTS)
    users = sorted(m for m, names in outside.items() if not m.startswith(BLENDER_SIDE) and names & BLENDER_MODULES)
    assert users == []


def _loaded_after(code: str, prefixes) -> list[str]:
    """Modules whose name starts with one of `prefixes` loaded by `code` in a fresh interpreter."""
    probe = f"import sys\n{code}\nprint([m for m in sys.modules if m.startswith({tuple(prefixes)!r})])"
    r = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return eval(r.stdout.strip().splitlines()[-1])


def test_import_rowbeam_is_light():
    assert _loaded_after("import rowbeam", [*BLENDER_MODULES, BLENDER_SIDE, *HEAVY]) == []


def test_a_command_without_blender_imports_nothing_of_blender():
    """`rowbeam check --help` builds the options of `check` only: the Blender side is never imported."""
    code = "from rowbeam.cli import main\ntry:\n    main(['check', '--help'])\nexcept SystemExit:\n    pass"
    assert _loaded_after(code, [*BLENDER_MODULES, BLENDER_SIDE]) == []
