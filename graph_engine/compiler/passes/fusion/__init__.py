"""Pattern fusions (docs/fusion.md): one pattern per module, each a pass `run(c)` returning
statistics; pipeline.py runs them after precision, in the order listed there."""
