"""Entries, read: the one query layer (store.py) with what selects entries (filters.py), the
failure groups (groups.py), an entry's shape (view.py, shape.py), the audit (audit.py) and the
schema registry (schemas.py)."""
