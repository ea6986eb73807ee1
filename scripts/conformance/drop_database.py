"""Dropping a test database as its owner, not a superuser.

DROP DATABASE ... WITH (FORCE) terminates the connections still open to
it, and an owner may terminate only its own role's: an autovacuum worker
busy in the database (after a file that wrote a lot) refuses it with
InsufficientPrivilege. A plain DROP DATABASE cancels autovacuum workers
itself and waits a few seconds for other connections, so it is tried then,
until the database is gone.
"""

import time

import psycopg2


def drop_database(cur, name, attempts=50):
    for _ in range(attempts):
        try:
            cur.execute('DROP DATABASE IF EXISTS "%s" WITH (FORCE)' % name)
            return
        except psycopg2.errors.InsufficientPrivilege:
            try:
                cur.execute('DROP DATABASE IF EXISTS "%s"' % name)
                return
            except psycopg2.errors.ObjectInUse:
                time.sleep(0.2)
    raise RuntimeError("database %s could not be dropped" % name)
