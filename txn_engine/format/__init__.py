"""The Lance on-disk format: manifest files, version naming, feature flags, deletion files,
row-id sequences and schema conversion. Pure encoding/decoding plus small readers over a
:class:`~txn_engine.storage.Storage`; nothing here decides what to commit."""
