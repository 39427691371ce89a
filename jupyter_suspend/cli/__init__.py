"""``jupyter suspend``: the command line used from outside the notebook pod.

One process of its own (like ``server``, ``kernel`` and ``sidecar``): it runs on
a researcher's laptop or in a platform job, with that person's or job's
Kubernetes credentials, and reads journals for the report and the simulation.
"""
