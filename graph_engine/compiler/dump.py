"""IR dumps: the graph as text and as Graphviz dot, before the first pass and after each pass,
when the compile option `dump_graph_path` names a directory.

Files: <dump_graph_path>/<graph>/<NN>_<pass>.txt and .dot, NN counting from 00 (the input
graph); <graph> is the compiled graph's name, sanitized, with a suffix .1, .2 ... when a
directory of that name exists already (each compile gets its own directory).

Text, one node per line in execution order, then one line per output:
    name = Op(input, input:1, ^control) {attr=value}
      :0 float32[2,3] NC1HWC0 const
"""
import os
import re

import numpy as np

from graph_engine.compiler import attrs as attr_util
from graph_engine.ops import dtypes as dt
from graph_engine.ops.errors import CompileError

_MAX_ATTR_CHARS = 80


def sanitize(name):
    """A file-name-safe version of a graph or pass name."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "graph"


def _value_desc(v):
    shape = "?" if v.shape is None else "[" + ",".join(map(str, v.shape)) + "]"
    fmt = getattr(v.format, "name", v.format) if v.format is not None else "ND"
    return f"{dt.name(v.dtype) if v.dtype is not None else '?'}{shape} {fmt}" \
        + (" const" if v.const is not None else "")


def _attr_text(av):
    kind = av.WhichOneof("value")
    if kind == "type":
        return dt.name(av.type)
    if kind == "list" and av.list.type:
        return "[" + ", ".join(dt.name(t) for t in av.list.type) + "]"
    value = attr_util.to_python(av)
    if isinstance(value, np.ndarray):
        return f"<{value.dtype}{list(value.shape)}>"
    text = repr(value)
    return text if len(text) <= _MAX_ATTR_CHARS else text[:_MAX_ATTR_CHARS - 3] + "..."


def _order(g):
    try:
        return g.topo_order()
    except CompileError:             # a cyclic graph still dumps, in insertion order
        return list(g)


def to_text(g, title):
    lines = [f"# {title}: {len(g)} nodes"]
    for n in _order(g):
        args = [v.ref for v in n.inputs] + [f"^{p.name}" for p in n.control_inputs]
        attrs = {k: v for k, v in n.attrs.items() if not (n.op == "Const" and k == "value")}
        attr_text = " {" + ", ".join(f"{k}={_attr_text(v)}" for k, v in sorted(attrs.items())) \
            + "}" if attrs else ""
        lines.append(f"{n.name} = {n.op}({', '.join(args)}){attr_text}")
        lines.extend(f"  :{v.index} {_value_desc(v)}" for v in n.outputs)
    return "\n".join(lines) + "\n"


def _q(text):
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_dot(g, title):
    lines = [f"digraph {_q(title)} {{", "  node [shape=box, fontname=monospace];"]
    for n in _order(g):
        outs = "\\n".join(f":{v.index} {_value_desc(v)}" for v in n.outputs)
        label = f"{n.name}\\n{n.op}" + (f"\\n{outs}" if outs else "")
        style = ', style=filled, fillcolor="#dddddd"' if n.op in ("_Arg", "_Retval", "Const") \
            else ""
        lines.append(f"  {_q(n.name)} [label=\"{_escape_label(label)}\"{style}];")
    for n in _order(g):
        for i, v in enumerate(n.inputs):
            lines.append(f"  {_q(v.node.name)} -> {_q(n.name)} "
                         f"[label={_q(f'{v.index}->{i} ' + _value_desc(v))}];")
        for p in n.control_inputs:
            lines.append(f"  {_q(p.name)} -> {_q(n.name)} [style=dashed, label=\"ctrl\"];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _escape_label(label):
    # keep the \n line breaks dot understands, escape quotes and other backslashes
    return label.replace('"', '\\"')


class Dumper:
    """Writes the numbered dumps of one compile into its own directory."""

    def __init__(self, directory, graph_name):
        base = os.path.join(directory, sanitize(graph_name))
        path, i = base, 0
        while True:                      # makedirs decides, so concurrent compiles never share
            try:
                os.makedirs(path)
                break
            except FileExistsError:
                i += 1
                path = f"{base}.{i}"
            except OSError as e:
                raise CompileError(f"compile option dump_graph_path: cannot create dump "
                                   f"directory {path!r}: {e.strerror or e}") from None
        self.path, self.graph_name, self.count = path, graph_name, 0

    @classmethod
    def for_options(cls, options, graph_name):
        directory = options.get("dump_graph_path")
        return cls(os.path.expanduser(directory), graph_name) if directory else None

    def write(self, pass_name, g):
        stem = os.path.join(self.path, f"{self.count:02d}_{sanitize(pass_name)}")
        title = f"{self.graph_name} after {pass_name}" if self.count else \
            f"{self.graph_name} (input)"
        self.count += 1
        try:
            with open(stem + ".txt", "w") as f:
                f.write(to_text(g, title))
            with open(stem + ".dot", "w") as f:
                f.write(to_dot(g, title))
        except OSError as e:
            raise CompileError(f"compile option dump_graph_path: cannot write {stem}.txt/.dot: "
                               f"{e.strerror or e}") from None
