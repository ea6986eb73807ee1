"""What oslo.policy decides under each policy file of tests/data/policy-files/.

Run in a venv with openstack-placement 16.0.0 (oslo.policy 6.0.1):

    python scripts/oslo_policy_decisions.py tests/data/policy-files > tests/data/oslo-policy-decisions.json

Placement's rules are registered as its policy Enforcer registers them
(placement.policies.list_rules()), with oslo.policy's defaults
(enforce_new_defaults on) and the file as policy_file. For every rule of
RULES and every caller of CALLERS, the decision on TARGET; a file
oslo.policy cannot load records the refusal. The callers and the target
are written into the record, so tests/startup/policy_files.rs asks the
service exactly the same questions; scripts/oslo_check.sh checks the
record against this script.
"""

import json
import os
import sys

from oslo_config import cfg
from oslo_policy import policy
from placement import policies

RULES = [
    "placement:resource_providers:list",
    "placement:resource_providers:show",
    "placement:usages",
    "placement:reshaper:reshape",
    "placement:allocations:manage",
]

# A project-scoped token of project p1 unless said otherwise.
CALLERS = {
    "admin": {"roles": ["admin", "member", "reader"], "project_id": "p1"},
    "service": {"roles": ["service"], "project_id": "services"},
    "member": {"roles": ["member", "reader"], "project_id": "p1"},
    "reader": {"roles": ["reader"], "project_id": "p1"},
    "reader-elsewhere": {"roles": ["reader"], "project_id": "p2"},
    "operator": {"roles": ["operator"], "project_id": "p1"},
    "nobody": {"roles": [], "project_id": "p1"},
    "system-admin": {"roles": ["admin"], "system_scope": "all"},
}

TARGET = {"project_id": "p1", "user_id": "u1"}


def decide(path):
    conf = cfg.ConfigOpts()
    conf([], project="placement", default_config_files=[], default_config_dirs=[])
    enforcer = policy.Enforcer(conf, policy_file=os.path.abspath(path))
    enforcer.register_defaults(policies.list_rules())
    try:
        enforcer.load_rules(force_reload=True)
    except Exception as e:  # the refusal is oslo.policy's own words
        return {"refused": type(e).__name__}
    decisions = {}
    for rule in RULES:
        decisions[rule] = {}
        for who, creds in CALLERS.items():
            creds = dict(creds, user_id="u-" + who)
            try:
                allowed = enforcer.enforce(rule, dict(TARGET), creds)
            except policy.InvalidScope:
                allowed = False
            decisions[rule][who] = bool(allowed)
    return {"decisions": decisions}


def main():
    root = sys.argv[1]
    files = sorted(
        f for f in os.listdir(root) if os.path.isfile(os.path.join(root, f))
    )
    record = {
        "callers": CALLERS,
        "target": TARGET,
        "files": {f: decide(os.path.join(root, f)) for f in files},
    }
    json.dump(record, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
