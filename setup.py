"""Installable package for the fairseq_residual plugin (also usable as ``--user-dir``).

Supported matrix (see README, "Supported versions"): Python 3.10 and 3.11 with
``fairseq-fixed==0.12.3.1`` (fairseq's main branch with the Python 3.11
dataclass fixes; it installs the same ``fairseq`` import package) and
torch 2.13.0. The official ``fairseq==0.12.2`` is not used: it fails at import
on Python 3.11, and on Python 3.10 its stock Transformer layers fail in eval
mode with torch 2.13 ("Mask Type should be defined").

torch is pinned to the release tested here: install it before this package
(the Makefile does) so pip does not resolve a different build.
"""

from setuptools import find_packages, setup

setup(
    name="fairseq_residual",
    version="0.1.0",
    description="ResiDual (Pre-Post-LN Transformer) and its baselines as a fairseq plugin",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="MIT",
    python_requires=">=3.10",
    packages=find_packages(
        include=["fairseq_residual", "fairseq_residual.*", "fairseq_residual_tools", "fairseq_residual_tools.*"]
    ),
    package_data={"fairseq_residual_tools.dataprep": ["checksums.json"]},
    install_requires=[
        "torch==2.13.0",
        "fairseq-fixed==0.12.3.1",
        "sacrebleu==2.6.0",
        "sacremoses==0.2.0",
        "subword-nmt==0.3.8",
        "sentencepiece==0.2.3",
        "tabulate==0.10.0",
        "matplotlib==3.11.2; python_version >= '3.11'",
        "matplotlib>=3.5; python_version < '3.11'",
    ],
    extras_require={"test": ["pytest==9.2.0"]},
)
