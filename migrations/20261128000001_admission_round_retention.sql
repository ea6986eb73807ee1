-- Admission rounds are kept for a retention window (--admission-round-retention)
-- and pruned by age: the index makes the periodic DELETE cheap.
CREATE INDEX admission_rounds_started_idx ON admission_rounds (started_at);
