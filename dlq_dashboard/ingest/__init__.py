"""Ingest: the mirror follows the DLQ stream and the advisory stream, parses each message into
an entry (parse.py) and writes it with the stream position in one transaction (writes.py)."""
