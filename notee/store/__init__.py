"""Data access: MySQL (SQLAlchemy Core) and Cassandra (prepared CQL). The only place queries live."""
