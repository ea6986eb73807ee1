-- A stored round holds its whole request and answer: about 20 MB each of
-- JSON for a round over 80,000 queued requests. PostgreSQL's default
-- compression (pglz) took 490 ms to store such a value, lz4 180 ms, for
-- about the same size. A server built without lz4 keeps the default.
DO $$
BEGIN
    ALTER TABLE admission_rounds
        ALTER COLUMN request SET COMPRESSION lz4,
        ALTER COLUMN result SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
    RAISE NOTICE 'lz4 is not available: admission rounds keep the default compression';
END $$;
