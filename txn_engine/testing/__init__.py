"""Test support shipped with txn_engine (fault injection, ...); see the submodules."""
