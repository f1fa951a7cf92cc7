"""How a writer behaves towards the other writers of a table, behind one seam.

The commit loop (:mod:`txn_engine.loop`) calls :class:`~txn_engine.loop.seam.Contention`
at fixed points; :func:`~txn_engine.contention.carrier.contention_for` gives a commit on an
object store offers and carriers (:class:`~txn_engine.contention.offering.Offering`), and
every other commit the plain loop. The modules, from the bottom up:

* :mod:`txn_engine.contention.offers`: offers (a losing writer's Append, posted for others
  to carry), their scans, what a contended commit remembers for the next one;
* :mod:`txn_engine.contention.created`: the versions a carrier created lately, at hand for
  the writers of its session;
* :mod:`txn_engine.contention.offering`: the seam's implementation;
* :mod:`txn_engine.contention.carrier`: the carrier (a writer of no data of its own that
  lands the offers), its beacon, the claims and the carriers writers host, and
  ``contention_for``.
"""
