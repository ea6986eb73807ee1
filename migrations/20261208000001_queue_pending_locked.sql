-- A project's pending requests, counted under the project's queue lock (a
-- transaction-level advisory lock), for the per-project cap. VOLATILE, so
-- its count takes a snapshot after the lock is granted: a submitter that
-- waited for another's commit counts that one's rows too, and two
-- submitters can never both take the last place.
CREATE FUNCTION queue_pending_locked(project text) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('placement.queue:' || project, 0));
    RETURN (SELECT count(*) FROM queue_requests
             WHERE state = 'pending' AND project_id = project);
END $$;
