"""The two halves of scripts/import_check.sh that speak HTTP.

  import_check.py populate URL      fill a real Placement through its API
  import_check.py compare URL_A URL_B [--in-order]
                                    every GET of both, which must be equal
                                    (--in-order: and sent in the same order)

Only the standard library: it runs with any python3.
"""
import json
import sys
import urllib.error
import urllib.request
import uuid

HEADERS = {"x-auth-token": "admin", "x-roles": "admin,service",
           "content-type": "application/json",
           "accept": "application/json"}


def call(base, method, path, body=None, version="1.39", expect=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers=dict(HEADERS, **{
                                     "openstack-api-version": "placement " + version}))
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    if expect is not None and status != expect:
        sys.exit(f"{method} {path}: {status} (wanted {expect}): {text}")
    return status, (json.loads(text) if text.strip() else None)


def populate(base):
    u = lambda: str(uuid.uuid4())  # noqa: E731
    rp = {}

    def provider(name, parent=None):
        rp[name] = u()
        body = {"name": name, "uuid": rp[name]}
        if parent:
            body["parent_provider_uuid"] = rp[parent]
        call(base, "POST", "/resource_providers", body, expect=200)

    def inventory(name, inv):
        _, cur = call(base, "GET", f"/resource_providers/{rp[name]}", expect=200)
        call(base, "PUT", f"/resource_providers/{rp[name]}/inventories",
             {"resource_provider_generation": cur["generation"], "inventories": inv}, expect=200)

    def traits(name, names):
        _, cur = call(base, "GET", f"/resource_providers/{rp[name]}", expect=200)
        call(base, "PUT", f"/resource_providers/{rp[name]}/traits",
             {"resource_provider_generation": cur["generation"], "traits": names}, expect=200)

    def aggregates(name, aggs):
        _, cur = call(base, "GET", f"/resource_providers/{rp[name]}", expect=200)
        call(base, "PUT", f"/resource_providers/{rp[name]}/aggregates",
             {"resource_provider_generation": cur["generation"], "aggregates": aggs}, expect=200)

    call(base, "PUT", "/resource_classes/CUSTOM_GOLD", expect=201)
    # Made in an order that disagrees with their names (issue 68): the
    # import must keep the old service's order, not sort.
    call(base, "PUT", "/traits/CUSTOM_ZZ_FIRST", expect=201)
    call(base, "PUT", "/traits/CUSTOM_RACK_A", expect=201)
    call(base, "PUT", "/traits/CUSTOM_PHYSNET_X", expect=201)
    agg = u()
    for cn in ("cn1", "cn2"):
        provider(cn)
        # Ratios MySQL keeps single-precision (0.9, 1.5, 3.3): the import
        # gives back what Placement was given.
        inventory(cn, {"VCPU": {"total": 32, "allocation_ratio": 4.0},
                       "MEMORY_MB": {"total": 131072, "reserved": 2048, "max_unit": 65536,
                                     "allocation_ratio": 1.5},
                       "CUSTOM_GOLD": {"total": 4, "allocation_ratio": 3.3}})
        traits(cn, ["HW_CPU_X86_AVX2", "CUSTOM_RACK_A", "CUSTOM_ZZ_FIRST", "COMPUTE_VOLUME_EXTEND"])
        aggregates(cn, [agg])
        for n in (0, 1):
            numa = f"{cn}_numa{n}"
            provider(numa, cn)
            inventory(numa, {"PCPU": {"total": 8}, "MEMORY_MB": {"total": 32768, "step_size": 1024}})
            pf = f"{cn}_numa{n}_pf0"
            provider(pf, numa)
            inventory(pf, {"SRIOV_NET_VF": {"total": 16, "min_unit": 1}})
            traits(pf, ["CUSTOM_PHYSNET_X"])
    provider("shared_disk")
    inventory("shared_disk", {"DISK_GB": {"total": 10000, "reserved": 100, "allocation_ratio": 0.9}})
    traits("shared_disk", ["MISC_SHARES_VIA_AGGREGATE"])
    aggregates("shared_disk", [agg])

    consumers = {}

    def allocate(name, allocs, project, user, ctype, gen=None):
        consumers.setdefault(name, u())
        body = {"allocations": {rp[p]: {"resources": r} for p, r in allocs.items()},
                "project_id": project, "user_id": user, "consumer_generation": gen,
                "consumer_type": ctype}
        call(base, "PUT", f"/allocations/{consumers[name]}", body, expect=204)

    # The first consumer type made is VOLUME, then INSTANCE, then
    # MIGRATION: not their names' order.
    allocate("vol0", {"shared_disk": {"DISK_GB": 50}}, "project-a", "alice", "VOLUME")
    allocate("vm1", {"cn1": {"VCPU": 4, "MEMORY_MB": 8192}, "shared_disk": {"DISK_GB": 100}},
             "project-a", "alice", "INSTANCE")
    allocate("vm2", {"cn1_numa0": {"PCPU": 2, "MEMORY_MB": 4096},
                     "cn1_numa0_pf0": {"SRIOV_NET_VF": 2}, "cn1": {"CUSTOM_GOLD": 1}},
             "project-b", "bob", "INSTANCE")
    allocate("vm3", {"cn2": {"VCPU": 8, "MEMORY_MB": 16384}}, "project-a", "carol", "INSTANCE")
    # A migration: vm3's allocation moves to a migration consumer and vm3
    # lands on cn1, in one POST /allocations (as Nova does it).
    consumers["mig"] = u()
    _, cur = call(base, "GET", f"/allocations/{consumers['vm3']}", expect=200)
    call(base, "POST", "/allocations", {
        consumers["mig"]: {"allocations": {rp["cn2"]: {"resources": {"VCPU": 8, "MEMORY_MB": 16384}}},
                           "project_id": "project-a", "user_id": "carol",
                           "consumer_generation": None, "consumer_type": "MIGRATION"},
        consumers["vm3"]: {"allocations": {rp["cn1"]: {"resources": {"VCPU": 8, "MEMORY_MB": 16384}}},
                           "project_id": "project-a", "user_id": "carol",
                           "consumer_generation": cur["consumer_generation"],
                           "consumer_type": "INSTANCE"},
    }, expect=204)
    # A reshape: cn2's VCPU moves to a new child, with the migration's
    # allocation following it.
    provider("cn2_cpu", "cn2")
    _, cn2 = call(base, "GET", f"/resource_providers/{rp['cn2']}", expect=200)
    _, child = call(base, "GET", f"/resource_providers/{rp['cn2_cpu']}", expect=200)
    _, mig = call(base, "GET", f"/allocations/{consumers['mig']}", expect=200)
    call(base, "POST", "/reshaper", {
        "inventories": {
            rp["cn2"]: {"resource_provider_generation": cn2["generation"], "inventories": {
                "MEMORY_MB": {"total": 131072, "reserved": 2048, "max_unit": 65536},
                "CUSTOM_GOLD": {"total": 4}}},
            rp["cn2_cpu"]: {"resource_provider_generation": child["generation"], "inventories": {
                "VCPU": {"total": 32, "allocation_ratio": 4.0}}},
        },
        "allocations": {consumers["mig"]: {
            "allocations": {rp["cn2"]: {"resources": {"MEMORY_MB": 16384}},
                            rp["cn2_cpu"]: {"resources": {"VCPU": 8}}},
            "project_id": "project-a", "user_id": "carol",
            "consumer_generation": mig["consumer_generation"], "consumer_type": "MIGRATION"}},
    }, expect=204)
    allocate("vol1", {"shared_disk": {"DISK_GB": 500}}, "project-c", "dave", "VOLUME")
    print(f"populated {len(rp)} providers and {len(consumers)} consumers")


def normalise(value):
    """Lists in a stable order (the real Placement's lack an ORDER BY)."""
    if isinstance(value, dict):
        # Every answer has its own request id.
        return {k: normalise(v) for k, v in value.items() if k != "request_id"}
    if isinstance(value, list):
        items = [normalise(v) for v in value]
        return sorted(items, key=lambda v: json.dumps(v, sort_keys=True))
    return value


CANDIDATE_QUERIES = [
    "resources=VCPU:2,MEMORY_MB:1024",
    "resources=VCPU:1,DISK_GB:10",
    "resources=VCPU:1&required=CUSTOM_RACK_A",
    "resources_A=PCPU:1&resources_B=SRIOV_NET_VF:1&required_B=CUSTOM_PHYSNET_X&same_subtree=_A,_B&group_policy=none",
    "resources=CUSTOM_GOLD:1&root_required=HW_CPU_X86_AVX2",
]


def in_order(text):
    """The answer as sent: objects as (key, value) lists, in their order."""
    if not text.strip():
        return None
    return json.loads(text, object_pairs_hook=lambda pairs: [p for p in pairs if p[0] != "request_id"])


# Where Placement's order is a Python set's (aggregates) or a search's
# own (candidates, compared as sets of candidates), no order is compared.
UNORDERED = ("/allocation_candidates", "/aggregates")


def compare(a, b, strict=False):
    """Every GET of both services; `strict`: every answer also in the
    same order, as sent (Placement on MariaDB, whose order is its indexes')."""
    paths = ["/resource_providers", "/resource_classes", "/traits", "/traits?associated=true",
             "/traits?associated=false", "/traits?name=startswith:CUSTOM_",
             "/traits?name=in:CUSTOM_ZZ_FIRST,HW_CPU_X86_AVX2,CUSTOM_RACK_A",
             "/usages?project_id=project-a", "/usages?project_id=project-b",
             "/usages?project_id=project-a&user_id=carol"]
    paths += [f"/allocation_candidates?{q}" for q in CANDIDATE_QUERIES]
    _, rps = call(a, "GET", "/resource_providers", expect=200)
    consumers = set()
    for p in rps["resource_providers"]:
        base = f"/resource_providers/{p['uuid']}"
        paths += [base, base + "/inventories", base + "/traits", base + "/aggregates",
                  base + "/usages", base + "/allocations"]
        _, allocs = call(a, "GET", base + "/allocations", expect=200)
        consumers.update(allocs["allocations"].keys())
    paths += [f"/allocations/{c}" for c in sorted(consumers)]
    differ = ordered = 0
    for path in paths:
        # The real Placement's GET /usages fails on PostgreSQL from 1.38
        # (a GROUP BY error): there it is compared at 1.37; on MariaDB at
        # 1.38, with its consumer types.
        version = ("1.38" if strict else "1.37") if path.startswith("/usages") else "1.39"
        sa, ja, ta = call_text(a, path, version)
        sb, jb, tb = call_text(b, path, version)
        if path.startswith("/allocation_candidates"):
            found = len((ja or {}).get("allocation_requests", []))
            print(f"  {path}: {sa}, {found} candidates from each")
        if (sa, normalise(ja)) != (sb, normalise(jb)):
            differ += 1
            print(f"DIFFERS {path}:\n  placement {sa} {json.dumps(ja, sort_keys=True)}\n"
                  f"  ours      {sb} {json.dumps(jb, sort_keys=True)}")
        elif strict and not any(u in path for u in UNORDERED):
            ordered += 1
            if in_order(ta) != in_order(tb):
                differ += 1
                print(f"ORDER DIFFERS {path}:\n  placement {ta}\n  ours      {tb}")
    print(f"compared {len(paths)} GETs ({len(rps['resource_providers'])} providers, "
          f"{len(consumers)} consumers{f'; {ordered} in their order as sent' if strict else ''}): "
          f"{len(paths) - differ} identical, {differ} different")
    return differ == 0


def call_text(base, path, version):
    """Status, parsed body and the body's text of a GET."""
    req = urllib.request.Request(base + path, headers=dict(HEADERS, **{
        "openstack-api-version": f"placement {version}"}))
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            text = r.read().decode()
            return r.status, (json.loads(text) if text.strip() else None), text
    except urllib.error.HTTPError as e:
        text = e.read().decode()
        return e.code, (json.loads(text) if text.strip() else None), text


if __name__ == "__main__":
    if sys.argv[1] == "populate":
        populate(sys.argv[2])
    elif sys.argv[1] == "compare":
        strict = "--in-order" in sys.argv[4:]
        sys.exit(0 if compare(sys.argv[2], sys.argv[3], strict) else 1)
    else:
        sys.exit(__doc__)
