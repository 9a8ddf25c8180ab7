"""The research experiments' own code, run by the scripts of ``benchmarks/`` (see ``docs/benchmarks/``)."""
