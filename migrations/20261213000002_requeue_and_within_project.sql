-- Preemption within a project, opt in (Kueue's withinClusterQueue):
-- 'lower_priority' lets a project's waiting request take room from the
-- project's own work of lower precedence; 'never' (the default) keeps
-- preemption between projects only.
ALTER TABLE project_fairness
    ADD COLUMN within_project_preemption text NOT NULL DEFAULT 'never'
        CHECK (within_project_preemption IN ('never', 'lower_priority'));

-- A preempted request asked to be queued again (`requeue: true`, Kueue's
-- requeuing and Slurm's PreemptMode=REQUEUE) comes back as a new pending
-- request of the same consumer, eligible only after a backoff that
-- doubles with each requeue of that consumer.
ALTER TABLE queue_requests
    ADD COLUMN eligible_at timestamptz,
    ADD COLUMN requeues integer NOT NULL DEFAULT 0;

-- The request a removal queued again, shown with the event.
ALTER TABLE preemption_events ADD COLUMN requeued_as uuid;
