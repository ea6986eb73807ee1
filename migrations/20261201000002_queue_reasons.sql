-- The last round's reason for each pending request, in a narrow table of
-- its own.
--
-- A round defers most of a deep queue, and a request's first deferral
-- wrote its reason into its queue_requests row: a wide row (the request's
-- JSON) under seven indexes, none of which a reason changes, rewritten in
-- full. A round over 80,000 new pending requests spent 4.3 of its 7.6 s
-- there. Here a reason is a (seq, reason) row appended in seq order.
-- Reasons of requests that left `pending` are ignored by readers and
-- dropped by the queue's retention pass; the reasons a request leaves with
-- (`consumer_exists`, `invalid`) stay on its own row.

CREATE TABLE queue_reasons (
    seq     bigint PRIMARY KEY,
    reason  text NOT NULL
);

INSERT INTO queue_reasons (seq, reason)
SELECT seq, reason FROM queue_requests WHERE state = 'pending' AND reason IS NOT NULL;

UPDATE queue_requests SET reason = NULL WHERE state = 'pending' AND reason IS NOT NULL;
