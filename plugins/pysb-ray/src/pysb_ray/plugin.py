"""The ``pysb.plugins`` entry point of pysb-ray: how ``pysb plugins`` lists it.

pysb-ray adds no hook to a pysb run: it drives partial mode from Ray workers through the
public API. The entry point exists so that ``pysb plugins`` shows the distribution and its
version next to the others (what a cluster operator checks on a node image). This module
imports nothing: every ``pysb run`` loads it.
"""
