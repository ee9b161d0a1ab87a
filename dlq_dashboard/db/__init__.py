"""The database: engine and transactions, the models, the migrations (the only way the schema
changes), many-row writes, and the leases that make one process do a job."""
