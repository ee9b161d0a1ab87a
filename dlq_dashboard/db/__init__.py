"""The database: engine and transactions, the models, the migrations (the only way the schema
changes), many-row writes, and the leases that make one process do a job."""

# Every table is in Base.metadata whichever module of the package is imported first.
from . import installation, models  # noqa: F401
