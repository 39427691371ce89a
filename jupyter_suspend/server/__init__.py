"""The Jupyter server extension: REST API, state machine, journal, backends.

Runs inside the Jupyter server process. It may import ``jupyter_suspend.common``; it never imports
``jupyter_suspend.kernel`` (that code runs in user kernels) nor ``jupyter_suspend.sidecar``
(another container). ``tests/test_layout.py`` keeps these boundaries.
"""
