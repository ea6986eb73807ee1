-- Lending a guarantee (Kueue's lendingLimit): of a top-level project's
-- unused guarantee in a class, at most this many units are lent to other
-- projects while it does not use them; the rest stays held back as
-- headroom (Mesos' rule, and the rule when no lending limit is set).
-- What is lent is won back through preemption advice (and its hold) when
-- the project queues work again.
ALTER TABLE project_quotas
    ADD COLUMN lending_limit bigint CHECK (lending_limit >= 0),
    ADD CHECK (lending_limit IS NULL OR (guarantee IS NOT NULL AND lending_limit <= guarantee));
