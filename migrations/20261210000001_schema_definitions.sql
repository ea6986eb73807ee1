-- Which text of `src/db/definitions.sql` (the functions the write path
-- calls, kept current outside the migrations) this database runs: the
-- SHA-384 of the text last applied. One row.

CREATE TABLE schema_definitions (
    one        boolean PRIMARY KEY DEFAULT true CHECK (one),
    sha384     text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
