"""The layering of the Python packages, checked statically (ast over the source files; nothing
is imported):

    npu_device  ->  graph_engine.compiler  ->  graph_engine.ops        (downward only)

graph_engine never imports npu_device, graph_engine.ops imports nothing of the compiler, and no
modules of graph_engine and npu_device import each other in a circle. Every import statement
counts, at module level or inside a function, except those under `if TYPE_CHECKING:`; a package
`__init__` importing its own submodules is no edge.
"""
import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("graph_engine", "npu_device")


def _module_name(path):
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources():
    """{module name: path} of every .py file of PACKAGES."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "__pycache__" not in path.parts:
                found[_module_name(path)] = path
    return found


def _is_type_checking(test):
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree):
    """Import and ImportFrom nodes anywhere in the tree, but not under `if TYPE_CHECKING:`."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _targets(node, module, is_package):
    """The module names an import statement of `module` names (as written, resolved)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        package = package[:len(package) - (node.level - 1)]
        base = ".".join(package + ([base] if base else []))
    # `from a.b import c, d`: a.b.c and a.b.d (each a module or a name in a.b), then a.b
    return [f"{base}.{alias.name}" for alias in node.names if alias.name != "*"] + [base]


def _resolve(name, modules):
    """The module of `modules` that importing `name` runs last: its longest known prefix."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        candidate = ".".join(parts[:i])
        if candidate in modules:
            return candidate
    return None


def _graph():
    """({module: {imported module: line}}, [(module, line, imported name)] of every import)."""
    sources = _sources()
    edges, raw = {m: {} for m in sources}, []
    for module, path in sources.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in _imports(tree):
            names = _targets(node, module, is_package)
            raw.extend((module, node.lineno, n) for n in dict.fromkeys(names))
            if isinstance(node, ast.ImportFrom) and len(names) > 1:
                names = names[:-1]     # `from a.b import c`: module a.b.c, else a.b (_resolve)
            for name in names:
                target = _resolve(name, sources)
                if target is None or target == module:
                    continue
                if is_package and target.startswith(module + "."):
                    continue                       # a package __init__ loading its submodules
                edges[module].setdefault(target, node.lineno)
    return edges, raw


EDGES, RAW = _graph()


def _where(module, line):
    return f"{_sources()[module].relative_to(ROOT)}:{line}"


def _violations(importer_prefix, forbidden):
    return [f"{_where(m, line)} imports {name}" for m, line, name in RAW
            if (m == importer_prefix or m.startswith(importer_prefix + "."))
            and any(name == f or name.startswith(f + ".") for f in forbidden)]


def test_the_sources_are_found():
    assert "graph_engine.ops" in EDGES and "graph_engine.compiler.graph" in EDGES
    assert "npu_device" in EDGES


def test_ops_import_neither_the_compiler_nor_npu_device():
    bad = _violations("graph_engine.ops", ("graph_engine.compiler", "npu_device"))
    assert not bad, "graph_engine.ops must stay below the compiler:\n  " + "\n  ".join(bad)


def test_graph_engine_does_not_import_npu_device():
    bad = _violations("graph_engine", ("npu_device",))
    assert not bad, "graph_engine must not import npu_device:\n  " + "\n  ".join(bad)


def _strongly_connected(edges):
    """Tarjan's algorithm, iterative: the components with more than one module."""
    index, low, on_stack, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    component.add(m)
                    if m == node:
                        break
                if len(component) > 1:
                    out.append(component)
    return out


def _cycle_in(component, edges):
    """One shortest import circle through the component's first module, as a path."""
    start = min(component)
    paths, seen = [[start]], {start}
    while paths:
        nxt = []
        for path in paths:
            for child in sorted(edges[path[-1]]):
                if child == start:
                    return path + [start]
                if child in component and child not in seen:
                    seen.add(child)
                    nxt.append(path + [child])
        paths = nxt
    raise AssertionError("not a strongly connected component")


def test_no_import_cycles():
    circles = []
    for component in _strongly_connected(EDGES):
        path = _cycle_in(component, EDGES)
        steps = [f"{a} -> {b} ({_where(a, EDGES[a][b])})" for a, b in zip(path, path[1:])]
        circles.append(f"{' -> '.join(path)}\n    " + "\n    ".join(steps) +
                       (f"\n    (the circle's component: {sorted(component)})"
                        if len(component) > len(path) - 1 else ""))
    assert not circles, "import cycles:\n  " + "\n  ".join(circles)
