"""Compiler passes, one per module; pipeline.py puts them in order."""
