-- The import chunk claim of a worker serving some tenants (`notee worker --service`, and every test's
-- claim loop) read import_chunk in primary-key order through every chunk of every import, done ones
-- included, locking each row for as long as it took to skip it: a claim of another tenant that
-- reached one of those rows then skipped it (SKIP LOCKED) and could come back empty while its own
-- chunks were queued (its lane idled a poll). With this index the claim's candidates are read among
-- the tenant's own open chunks only (notee/store/imports_sql.py `claim`).
-- No table changes; retention of import_chunk is unchanged (0028).
-- serves: a tenant's claimable chunks: queued (lease_until NULL, in primary-key order: oldest import
-- first) and running with an expired lease (lease_until < now), of one service at a time
CREATE INDEX IF NOT EXISTS ix_import_chunk_service_open ON import_chunk (service, state, lease_until);
