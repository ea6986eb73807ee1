#!/bin/sh
# Run once by the postgres image on an empty volume
# (/docker-entrypoint-initdb.d): the service's role, a plain owner of its
# database, as the deployment tools create it. The password comes from the
# container's environment, never from this file.
set -eu
# The service's password must not be the superuser's: with it, whoever
# reads the service's settings logs in as `postgres` and runs programs on
# this host (COPY ... TO PROGRAM).
if [ -z "${PLACEMENT_DB_PASSWORD:-}" ]; then
    echo "initdb.sh: PLACEMENT_DB_PASSWORD is not set" >&2
    exit 1
fi
if [ "$PLACEMENT_DB_PASSWORD" = "${POSTGRES_PASSWORD:-}" ]; then
    echo "initdb.sh: PLACEMENT_DB_PASSWORD is the superuser's password (PLACEMENT_DB_SUPERUSER_PASSWORD); give the service a password of its own" >&2
    exit 1
fi
psql -v ON_ERROR_STOP=1 --username postgres --dbname postgres -v pw="$PLACEMENT_DB_PASSWORD" <<'SQL'
CREATE ROLE placement LOGIN PASSWORD :'pw';
CREATE DATABASE placement OWNER placement;
SQL
