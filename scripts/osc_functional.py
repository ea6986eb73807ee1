"""osc-placement's own functional suite, run against this service.

    python osc_functional.py SHARD COUNT   (run by scripts/osc_functional.sh)

osc-placement's functional tests (osc_placement/tests/functional) drive
python-openstackclient in process against Placement's PlacementFixture: a
fresh in-RAM Placement per test, noauth2 with the token `admin`, the legacy
policy defaults. Here that fixture is replaced by one that gives each test a
fresh server of ours on a fresh database (a copy of a migrated template),
with the same token and policy defaults; the tests themselves are
osc-placement 4.9.1's, unchanged. SHARD of COUNT: this process runs every
COUNT-th test from the SHARD-th, so that shards can run side by side.

Environment: PLACEMENT_BIN (the server), DATABASE_URL (a role that may
CREATE DATABASE), OSC_TEMPLATE_DB (the migrated template), PSQL (psql's
path), OSC_WORK (where server logs go).
"""
import itertools
import os
import socket
import subprocess
import sys
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

import fixtures
from placement.tests.functional.fixtures import placement as placement_fixture

BIN = os.environ["PLACEMENT_BIN"]
ADMIN_URL = os.environ["DATABASE_URL"]
TEMPLATE = os.environ["OSC_TEMPLATE_DB"]
PSQL = os.environ["PSQL"]
WORK = os.environ["OSC_WORK"]
_names = itertools.count()


def _database_url(name):
    parts = urllib.parse.urlsplit(ADMIN_URL)
    return urllib.parse.urlunsplit(parts._replace(path="/" + name))


def _sql(statement):
    subprocess.run([PSQL, ADMIN_URL, "-q", "-v", "ON_ERROR_STOP=1", "-c", statement],
                   check=True, stdout=subprocess.DEVNULL)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServiceFixture(fixtures.Fixture):
    """PlacementFixture's part the tests use (`endpoint`, `token`), given
    by a fresh server of ours on a fresh database."""

    def __init__(self, token="admin", **_ignored):
        super().__init__()
        self.token = token

    def _setUp(self):
        name = f"osc_{os.getpid()}_{next(_names)}"
        _sql(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE}"')
        self.addCleanup(_sql, f'DROP DATABASE IF EXISTS "{name}"')
        port = _free_port()
        log = open(os.path.join(WORK, f"{name}.log"), "wb")
        self.addCleanup(log.close)
        server = subprocess.Popen(
            [BIN, "serve", "--bind", f"127.0.0.1:{port}",
             "--database-url", _database_url(name), "--migrate", "false",
             "--auth-strategy", "noauth2", "--enforce-new-defaults", "false"],
            stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "RUST_LOG": "warn"})
        self.addCleanup(self._stop, server)
        self.endpoint = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(self.endpoint + "/", timeout=1).close()
                return
            except (urllib.error.URLError, OSError):
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the server did not start; see {log.name}")
                time.sleep(0.02)

    @staticmethod
    def _stop(server):
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _tests(suite):
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from _tests(item)
        else:
            yield item


def main():
    shard, count = int(sys.argv[1]), int(sys.argv[2])
    placement_fixture.PlacementFixture = ServiceFixture
    import osc_placement.tests.functional as functional

    top = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(functional.__file__))))
    found = unittest.defaultTestLoader.discover(os.path.dirname(functional.__file__), top_level_dir=top)
    mine = [t for i, t in enumerate(_tests(found)) if i % count == shard]
    result = unittest.TextTestRunner(stream=sys.stdout, verbosity=1).run(unittest.TestSuite(mine))
    failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
    passed = result.testsRun - failed - len(result.skipped)
    print(f"shard {shard}: {passed} passed, {failed} failed, {len(result.skipped)} skipped")
    sys.exit(0 if failed == 0 and result.testsRun else 1)


if __name__ == "__main__":
    main()
