"""A shim for ``python setup.py develop`` and older pip: every piece of metadata is in pyproject.toml."""

from setuptools import setup

setup()
