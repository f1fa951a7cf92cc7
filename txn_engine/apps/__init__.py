"""Applications built on the engine, kept apart from it: the ``txn-engine`` command line
(:mod:`txn_engine.apps.cli`) and the concurrent-writer stress run (:mod:`txn_engine.apps.stress`).

Nothing in the engine or the integrations imports this package (``tests/unit/test_layers.py``
fails if one does); applications import the engine and :mod:`txn_engine.testing`.
"""
