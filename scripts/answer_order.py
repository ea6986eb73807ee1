#!/usr/bin/env python3
"""The order of Placement's answers, recorded from the real Placement.

    python3 scripts/answer_order.py record URL OUT.json
    python3 scripts/answer_order.py merge MARIADB.json SQLITE.json OUT.json

`record` runs one history of requests against a Placement at URL (noauth2)
and writes each request with the status and body answered, every object's
keys in the order they came. `merge` keeps the first recording and marks
each answer whose order the two recordings disagree on `"order_fixed":
false`: that order is the query plan's, not Placement's (the two must agree
on everything else). scripts/record_answer_order.sh records openstack-
placement 16.0.0 on MariaDB and on SQLite; tests/answer_order.rs replays the
requests against this service and requires every object's keys, and every
list, in the recorded order where it is fixed.

Only the standard library: the recording is made once, the replay is Rust.
"""
import json
import sys
import urllib.error
import urllib.request

# Fixed uuids, chosen so that uuid order is not write order.
P1 = "ffffffff-0000-4000-8000-000000000001"
P2 = "11111111-0000-4000-8000-000000000002"
P3 = "88888888-0000-4000-8000-000000000003"
C1 = "cccccccc-0000-4000-8000-0000000000c1"
C2 = "22222222-0000-4000-8000-0000000000c2"
C3 = "aaaaaaaa-0000-4000-8000-0000000000c3"
C4 = "55555555-0000-4000-8000-0000000000c4"
PROJECT = "6b1d0c6e-0000-4000-8000-00000000000a"
USER = "7c2e1d7f-0000-4000-8000-00000000000b"


def history():
    """(method, path, microversion, body) in order. Generations are
    literal: the history is fixed, so they are too."""
    steps = [
        # Custom classes and traits created out of name order.
        ("PUT", "/resource_classes/CUSTOM_ZETA", "1.7", None),
        ("PUT", "/resource_classes/CUSTOM_ALPHA", "1.7", None),
        ("PUT", "/traits/CUSTOM_ZED", "1.6", None),
        ("PUT", "/traits/CUSTOM_ABC", "1.6", None),
        ("POST", "/resource_providers", "1.20", {"name": "p1", "uuid": P1}),
        ("POST", "/resource_providers", "1.20", {"name": "p2", "uuid": P2}),
        ("POST", "/resource_providers", "1.20", {"name": "p3", "uuid": P3, "parent_provider_uuid": P1}),
        # Inventories written out of class order.
        ("PUT", f"/resource_providers/{P1}/inventories", "1.26", {
            "resource_provider_generation": 0,
            "inventories": {
                "DISK_GB": {"total": 100},
                "CUSTOM_ZETA": {"total": 10},
                "VCPU": {"total": 8, "allocation_ratio": 2.0},
                "CUSTOM_ALPHA": {"total": 10},
                "MEMORY_MB": {"total": 4096, "reserved": 512},
            },
        }),
        ("GET", f"/resource_providers/{P1}/inventories", "1.26", None),
        ("PUT", f"/resource_providers/{P2}/inventories", "1.0", {
            "resource_provider_generation": 0,
            "inventories": {
                "MEMORY_MB": {"total": 2048},
                "VCPU": {"total": 4},
                "DISK_GB": {"total": 50, "max_unit": 20},
            },
        }),
        ("GET", f"/resource_providers/{P2}/inventories", "1.0", None),
        # One class at a time, newest class first.
        ("POST", f"/resource_providers/{P3}/inventories", "1.0",
         {"resource_class": "DISK_GB", "total": 30, "resource_provider_generation": 0}),
        ("POST", f"/resource_providers/{P3}/inventories", "1.0",
         {"resource_class": "VCPU", "total": 2, "resource_provider_generation": 1}),
        ("PUT", f"/resource_providers/{P3}/inventories/DISK_GB", "1.0",
         {"resource_provider_generation": 2, "total": 40}),
        ("GET", f"/resource_providers/{P3}/inventories/VCPU", "1.0", None),
        ("GET", f"/resource_providers/{P3}/inventories", "1.0", None),
        # Traits written out of trait order (one standard trait only: the
        # standard traits' own order is a set's, below).
        ("PUT", f"/resource_providers/{P1}/traits", "1.6", {
            "resource_provider_generation": 1,
            "traits": ["CUSTOM_ABC", "HW_CPU_X86_AVX2", "CUSTOM_ZED"],
        }),
        ("GET", f"/resource_providers/{P1}/traits", "1.6", None),
        ("GET", "/traits?name=startswith:CUSTOM_", "1.6", None),
        ("GET", "/traits?name=in:CUSTOM_ZED,HW_CPU_X86_AVX2,CUSTOM_ABC", "1.6", None),
        ("GET", "/resource_classes", "1.7", None),
        # Allocations written providers out of uuid order, classes out of
        # class order.
        ("PUT", f"/allocations/{C1}", "1.28", {
            "allocations": {
                P1: {"resources": {"MEMORY_MB": 512, "VCPU": 2, "CUSTOM_ZETA": 1}},
                P2: {"resources": {"DISK_GB": 10, "VCPU": 1}},
            },
            "consumer_generation": None, "project_id": PROJECT, "user_id": USER,
        }),
    ]
    for mv in ("1.0", "1.12", "1.28", "1.38"):
        steps.append(("GET", f"/allocations/{C1}", mv, None))
    steps += [
        # Written again the other way round.
        ("PUT", f"/allocations/{C1}", "1.28", {
            "allocations": {
                P2: {"resources": {"VCPU": 1, "DISK_GB": 10}},
                P1: {"resources": {"CUSTOM_ZETA": 1, "VCPU": 2, "MEMORY_MB": 512}},
            },
            "consumer_generation": 1, "project_id": PROJECT, "user_id": USER,
        }),
        ("GET", f"/allocations/{C1}", "1.38", None),
        # Several consumers at once.
        ("POST", "/allocations", "1.38", {
            C2: {
                "allocations": {
                    P1: {"resources": {"VCPU": 1, "MEMORY_MB": 256}},
                    P2: {"resources": {"MEMORY_MB": 128}},
                },
                "consumer_generation": None, "project_id": PROJECT, "user_id": USER,
                "consumer_type": "INSTANCE",
            },
            C3: {
                "allocations": {P3: {"resources": {"VCPU": 1, "DISK_GB": 5}}},
                "consumer_generation": None, "project_id": PROJECT, "user_id": USER,
                "consumer_type": "MIGRATION",
            },
        }),
        ("GET", f"/allocations/{C2}", "1.38", None),
        ("GET", f"/allocations/{C3}", "1.38", None),
        # The list form of before 1.12.
        ("PUT", f"/allocations/{C4}", "1.8", {
            "allocations": [
                {"resource_provider": {"uuid": P2}, "resources": {"VCPU": 1}},
                {"resource_provider": {"uuid": P1}, "resources": {"DISK_GB": 5, "VCPU": 1}},
            ],
            "project_id": PROJECT, "user_id": USER,
        }),
        ("GET", f"/allocations/{C4}", "1.12", None),
        ("GET", f"/resource_providers/{P1}/allocations", "1.28", None),
        ("GET", f"/resource_providers/{P2}/allocations", "1.0", None),
        ("GET", f"/resource_providers/{P1}/usages", "1.0", None),
        ("GET", f"/resource_providers/{P2}/usages", "1.0", None),
        ("GET", f"/usages?project_id={PROJECT}", "1.9", None),
        ("GET", f"/usages?project_id={PROJECT}", "1.38", None),
        ("GET", f"/resource_providers/{P1}", "1.20", None),
        ("GET", "/resource_providers", "1.14", None),
        ("GET", f"/resource_providers?in_tree={P1}", "1.14", None),
        # An inventory changed in place keeps its place.
        ("PUT", f"/resource_providers/{P1}/inventories/DISK_GB", "1.0",
         {"resource_provider_generation": 6, "total": 200}),
        ("GET", f"/resource_providers/{P1}/inventories", "1.0", None),
    ]
    return steps


def call(base, method, path, mv, body):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method)
    req.add_header("OpenStack-API-Version", f"placement {mv}")
    req.add_header("X-Auth-Token", "admin")
    req.add_header("Accept", "application/json")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    answer = json.loads(raw, object_pairs_hook=dict) if raw.strip() else None
    return status, answer


def record(base, out):
    steps = []
    for method, path, mv, body in history():
        status, answer = call(base, method, path, mv, body)
        if status >= 400:
            sys.exit(f"{method} {path} at {mv}: {status} {answer}")
        steps.append({"method": method, "path": path, "microversion": mv,
                      "body": body, "status": status, "answer": answer})
    with open(out, "w") as f:
        json.dump({"recorded_from": "openstack-placement 16.0.0",
                   "steps": steps}, f, indent=1)
        f.write("\n")


def unordered(value):
    """`value` with every object's keys and every list sorted."""
    if isinstance(value, dict):
        return {k: unordered(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return sorted((unordered(v) for v in value), key=json.dumps)
    return value


def merge(first, second, out):
    a = json.load(open(first))
    b = json.load(open(second))
    fixed = 0
    for x, y in zip(a["steps"], b["steps"], strict=True):
        where = f"{x['method']} {x['path']} at {x['microversion']}"
        if x["status"] != y["status"] or unordered(x["answer"]) != unordered(y["answer"]):
            sys.exit(f"{where}: the recordings differ beyond order")
        x["order_fixed"] = json.dumps(x["answer"]) == json.dumps(y["answer"])
        fixed += x["order_fixed"]
        if not x["order_fixed"]:
            print(f"order not fixed in Placement: {where}")
    with open(out, "w") as f:
        json.dump(a, f, indent=1)
        f.write("\n")
    print(f"{len(a['steps'])} answers, {fixed} in a fixed order")


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "record":
        record(sys.argv[2].rstrip("/"), sys.argv[3])
    elif len(sys.argv) == 5 and sys.argv[1] == "merge":
        merge(*sys.argv[2:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
