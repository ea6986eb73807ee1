#!/usr/bin/env python3
"""Times batch submissions into one project as its queue grows (issue 50,
item 3): BATCHES batches of SIZE requests into project A of a server at
BASE (noauth2, admin), nothing admitted (no providers). Prints each
batch's seconds and the project's depth before it.

    python3 scripts/queue_depth_bench.py http://127.0.0.1:8080 11 10000

With a fourth argument `pages`, it then times pages of 1,000 of A's
requests (`GET /queue?project_id=A&limit=1000`, issue 64): the front page
and a page 40,000 deep (after the marker at that depth), alternated,
PAGES times each (default 9), and prints each kind's median and range.

    python3 scripts/queue_depth_bench.py http://127.0.0.1:8080 5 10000 pages
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


def get(base, path):
    req = urllib.request.Request(
        base + path,
        headers={"x-auth-token": "admin", "openstack-api-version": "placement 1.39"},
    )
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)


def pages(base, ids, times):
    """Times the front page and the page after the 40,000th request."""
    deep_marker = ids[min(40_000, len(ids)) - 1]
    took = {"front": [], "deep": []}
    for _ in range(times):
        for kind, marker in (("front", None), ("deep", deep_marker)):
            path = "/queue?project_id=A&limit=1000" + (f"&marker={marker}" if marker else "")
            t = time.monotonic()
            page = get(base, path)
            took[kind].append(time.monotonic() - t)
            assert len(page["requests"]) == 1000, len(page["requests"])
    for kind, times_ in took.items():
        times_.sort()
        print(f"{kind} page of 1,000: median {times_[len(times_) // 2] * 1000:.1f} ms "
              f"(range {times_[0] * 1000:.1f}-{times_[-1] * 1000:.1f} ms, {len(times_)} runs)")


def main():
    base, batches, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    want_pages = len(sys.argv) > 4 and sys.argv[4] == "pages"
    ids = []
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
        ids.extend(r["id"] for r in body["requests"])
        depth += size
    if want_pages:
        pages(base, ids, int(sys.argv[5]) if len(sys.argv) > 5 else 9)


if __name__ == "__main__":
    main()
