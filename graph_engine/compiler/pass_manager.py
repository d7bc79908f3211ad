"""The compile pipeline: named passes over one Compilation, run in order.

A pass is a function `run(c: Compilation)` in its own module under passes/; it reads and
updates the state below. Errors are CompileErrors naming the node; anything else escaping a pass
is a compiler bug and is reported with the pass name.
"""
import dataclasses
import time

from graph_engine.compiler.errors import CompileError


@dataclasses.dataclass
class Compilation:
    name: str
    graph: object                                   # graph.Graph, _Arg/_Retval delimited
    input_shapes: list                              # concrete shape per _Arg index
    options: dict = dataclasses.field(default_factory=dict)
    source: str = "cluster"                         # "cluster" or "eager op"
    program: object = None                          # passes.lower.Program
    plan: object = None                             # passes.plan_memory.Plan
    model: object = None                            # model_format.Model
    log: list = dataclasses.field(default_factory=list)   # per pass: name, nodes after, seconds


class PassManager:
    def __init__(self, passes):
        self.passes = list(passes)                  # [(name, run)]

    def run(self, c: Compilation):
        for name, run in self.passes:
            start = time.perf_counter()
            try:
                run(c)
            except CompileError:
                raise
            except Exception as e:                  # a bug in a pass: say where
                raise CompileError(f"internal error in compiler pass {name!r} while compiling "
                                   f"{c.name!r}: {type(e).__name__}: {e}") from e
            c.log.append({"pass": name, "nodes": len(c.graph),
                          "ms": round(1000 * (time.perf_counter() - start), 3)})
        return c
