"""The built-in context types, shipped as package data (`contextfs.builtin_schemas`).

This file makes the folder a regular package, so `importlib.resources.files()` gives the
folder itself in every install kind: editable, wheel, sdist. Without it the folder is a
namespace package, `files()` gives a `MultiplexedPath`, and a wheel mounted with no types.
"""
