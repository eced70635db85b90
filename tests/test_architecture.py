"""docs/architecture.md holds: every module of qconvert/ imports only from its own package or from
the layers above its own, and no modules import each other in a cycle; the modules outside ops/
that name ONNX ops are the ones the page lists; every file the page names exists; no function is
longer than MAX_FUNCTION_LINES. The lists are read from the page, so the page and the code cannot
drift apart."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import onnx.defs

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "qconvert"
PAGE = ROOT / "docs" / "architecture.md"
GENERATED = {"qconvert.tflite.schema_generated"}
ROOT_MODULES_AT_MOST = 6  # files directly in qconvert/, __init__.py and __main__.py included
MAX_FUNCTION_LINES = 60  # outside generated code


def _layers() -> list[list[str]]:
    return [line.split() for line in _block("layers").splitlines() if line.strip()]


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))
            if _module_name(p) not in GENERATED}


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The qconvert modules `name` imports (a package counts as its __init__)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            targets = [f"{target}.{a.name}" if f"{target}.{a.name}" in modules else target
                       for a in node.names]
        else:
            continue
        found.update(t for t in targets if t == "qconvert" or t.startswith("qconvert."))
    return found - {name}


def _layer_of(name: str, layers: list[list[str]]) -> tuple[int, str]:
    """(layer index, the layer's entry) of a module: the longest entry it is or lies in."""
    best = None
    for k, layer in enumerate(layers):
        for entry in layer:
            if name == entry or name.startswith(entry + "."):
                if best is None or len(entry) > len(best[1]):
                    best = (k, entry)
    assert best is not None, f"{name} is in no layer of {PAGE.name}: add it there"
    return best


def test_every_import_goes_to_its_own_package_or_a_layer_above():
    layers, modules = _layers(), _modules()
    wrong = []
    for name, path in modules.items():
        layer, entry = _layer_of(name, layers)
        for target in _imports(name, path, modules):
            target_layer, target_entry = _layer_of(target, layers)
            if target_entry == entry:
                continue
            if target_layer >= layer:
                wrong.append(f"{name} (layer {layer}) imports {target} (layer {target_layer})")
    assert not wrong, "imports against docs/architecture.md's layers:\n" + "\n".join(wrong)


# The modules of transforms/ that are not steps: what steps may import from their own package.
TRANSFORMS_SHARED = {"qconvert.transforms.engine", "qconvert.transforms.helpers",
                     "qconvert.transforms.quantization"}


def test_no_transformation_step_imports_another():
    """A helper two steps need lives in transforms/helpers.py (or quantization.py), not in one of
    them: each step stays one function in one file."""
    modules = _modules()
    wrong = []
    for name, path in modules.items():
        if (not name.startswith("qconvert.transforms.") or name in TRANSFORMS_SHARED
                or name == "qconvert.transforms.pipeline"):
            continue
        for target in _imports(name, path, modules):
            if target.startswith("qconvert.transforms.") and target not in TRANSFORMS_SHARED:
                wrong.append(f"{name} imports {target}")
    assert not wrong, "\n".join(wrong)


def test_no_modules_import_each_other_in_a_cycle():
    modules = _modules()
    graph = {name: _imports(name, path, modules) & modules.keys() for name, path in modules.items()}
    # A package's __init__ importing its own modules is how a package exports them: not a cycle.
    for name in graph:
        graph[name] = {t for t in graph[name] if not name.startswith(t + ".")}
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not cycles, f"modules that import each other: {cycles}"


def test_the_package_root_holds_few_modules():
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root) <= ROOT_MODULES_AT_MOST, root


def test_the_checker_sees_an_upward_import(tmp_path):
    """The checker itself: a module of a lower layer importing the driver is found."""
    layers, modules = _layers(), _modules()
    fake = tmp_path / "qconvert" / "ops" / "fake.py"
    fake.parent.mkdir(parents=True)
    fake.write_text("from ..driver.options import Options\n")
    found = _imports("qconvert.ops.fake", fake, modules)
    assert found == {"qconvert.driver.options"}
    assert _layer_of("qconvert.driver.options", layers)[0] > _layer_of("qconvert.ops.fake", layers)[0]


def _block(marker: str) -> str:
    return PAGE.read_text().split(f"<!-- {marker} -->", 1)[1].split("```", 2)[1]


def test_the_modules_naming_onnx_ops_outside_ops_are_the_pages():
    """A module outside ops/ that reads a node's op_type or makes a node, with an ONNX op's name
    in it, knows ONNX ops: the page lists each with why."""
    listed = {line.split()[0] for line in _block("onnx op names").splitlines() if line.strip()}
    op_types = {schema.name for schema in onnx.defs.get_all_schemas_with_history()}
    found = set()
    for name, path in _modules().items():
        if name.startswith("qconvert.ops."):
            continue
        tree = ast.parse(path.read_text())
        nodes = any(isinstance(n, ast.Attribute) and n.attr in ("op_type", "make_node") for n in ast.walk(tree))
        if nodes and any(isinstance(n, ast.Constant) and n.value in op_types for n in ast.walk(tree)
                         if isinstance(n, ast.Constant) and isinstance(n.value, str)):
            found.add(str(path.relative_to(ROOT)))
    assert found == listed, {"not on the page": sorted(found - listed),
                             "on the page, naming none": sorted(listed - found)}


def test_every_file_the_page_names_exists():
    """Paths (`onnx/loader.py`, `tests/test_architecture.py`) relative to the repository or to
    qconvert/; a file name in a table row is in that row's package; any other bare file name is
    somewhere in qconvert/, tests/ or docs/."""
    text = PAGE.read_text()
    known = {p.name for folder in ("qconvert", "tests", "docs") for p in (ROOT / folder).rglob("*")}
    missing = []
    for path in re.findall(r"[\w.]*[\w/]+\.(?:py|md)\b", text):
        if "/" in path:
            missing += [path] if not any((base / path).exists() for base in (ROOT, PACKAGE)) else []
        elif path not in known:
            missing.append(path)
    for package, cells in re.findall(r"^\| `(\w+)/` \|(.*)$", text, re.M):
        missing += [f"{package}/{f}" for f in re.findall(r"`(\w+\.py)`", cells)
                    if not (PACKAGE / package / f).exists()]
    assert not missing, f"{PAGE.name} names files that do not exist: {sorted(set(missing))}"


def test_no_function_is_longer_than_the_limit():
    long = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{name}.{node.name}: {lines} lines")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(long)
