#!/bin/sh
# Run once by the postgres image on an empty volume
# (/docker-entrypoint-initdb.d): the service's role, a plain owner of its
# database, as the deployment tools create it. The password comes from the
# container's environment, never from this file.
set -eu
psql -v ON_ERROR_STOP=1 --username postgres --dbname postgres -v pw="$PLACEMENT_DB_PASSWORD" <<'SQL'
CREATE ROLE placement LOGIN PASSWORD :'pw';
CREATE DATABASE placement OWNER placement;
SQL
