"""The one build step pyproject.toml cannot state without a warning: the record walks of compacted
topics in C (gateway/formats/compaction.py), optional, so a machine without a compiler installs the
package all the same and runs the same walks in Python."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("gateway.formats._speedups", ["gateway/formats/_speedups.c"], optional=True)])
