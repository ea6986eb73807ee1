#!/usr/bin/env python3
"""Times batch submissions into one project as its queue grows (issue 50,
item 3): BATCHES batches of SIZE requests into project A of a server at
BASE (noauth2, admin), nothing admitted (no providers). Prints each
batch's seconds and the project's depth before it.

    python3 scripts/queue_depth_bench.py http://127.0.0.1:8080 11 10000
"""
import json
import sys
import time
import urllib.request
import uuid


def post(base, body):
    req = urllib.request.Request(
        base + "/queue",
        data=json.dumps(body).encode(),
        method="POST",
        headers={
            "x-auth-token": "admin",
            "content-type": "application/json",
            "openstack-api-version": "placement 1.39",
        },
    )
    with urllib.request.urlopen(req, timeout=600) as r:
        return r.status, json.load(r)


def main():
    base, batches, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    depth = 0
    for b in range(batches):
        items = [
            {"consumer_uuid": str(uuid.uuid4()), "project_id": "A", "user_id": "u",
             "resources": {"VCPU": 1}}
            for _ in range(size)
        ]
        t = time.monotonic()
        status, body = post(base, {"requests": items})
        took = time.monotonic() - t
        assert status == 202, body
        last = body["requests"][-1]["position_in_project"]
        print(f"batch {b + 1}: {size} into a project holding {depth}: {took:.2f} s (last position {last})")
        depth += size


if __name__ == "__main__":
    main()
