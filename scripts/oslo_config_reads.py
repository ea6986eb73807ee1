"""What oslo.config makes of each case under tests/data/placement-conf/.

Run in a venv with openstack-placement 16.0.0 (oslo.config, keystonemiddleware):

    python scripts/oslo_config_reads.py tests/data/placement-conf > tests/data/oslo-config-reads.json

A case is a folder: its placement.conf is the --config-file, its
placement.conf.d/ (when there) the --config-dir. The options registered are
Placement's own (placement.conf.register_opts, as its WSGI application and
placement-manage do), oslo.policy's as Placement's Enforcer registers them,
and keystonemiddleware's [keystone_authtoken] with the password plugin's, as
auth_token registers them. For every option this
server reads (READ below), the value oslo.config returns when a file set it;
a case oslo.config refuses records the refusal instead. tests/startup/
config.rs holds the service's reading to the recorded file, and
scripts/test.sh checks the record against this script.
"""

import json
import os
import sys

from keystoneauth1 import loading as ks_loading
from keystonemiddleware.auth_token import _opts as auth_token_opts
from oslo_config import cfg
from oslo_policy import opts as policy_opts
from placement import conf as placement_conf

# (group, option) the service reads from a file. Not [oslo_policy]
# enforce_scope: oslo.policy 6 dropped it (scope is always enforced); the
# service still reads it, as its own option.
READ = [
    ("DEFAULT", "debug"),
    ("DEFAULT", "log_file"),
    ("DEFAULT", "log_dir"),
    ("placement_database", "connection"),
    ("placement", "max_allocation_candidates"),
    ("placement", "randomize_allocation_candidates"),
    ("placement", "allocation_candidates_generation_strategy"),
    ("placement", "allocation_conflict_retry_count"),
    ("placement", "incomplete_consumer_project_id"),
    ("placement", "incomplete_consumer_user_id"),
    ("api", "auth_strategy"),
    ("keystone_authtoken", "auth_url"),
    ("keystone_authtoken", "www_authenticate_uri"),
    ("keystone_authtoken", "username"),
    ("keystone_authtoken", "password"),
    ("keystone_authtoken", "project_name"),
    ("keystone_authtoken", "user_domain_name"),
    ("keystone_authtoken", "project_domain_name"),
    ("keystone_authtoken", "user_domain_id"),
    ("keystone_authtoken", "project_domain_id"),
    ("keystone_authtoken", "token_cache_time"),
    ("keystone_authtoken", "http_connect_timeout"),
    ("keystone_authtoken", "cafile"),
    ("keystone_authtoken", "insecure"),
    ("oslo_policy", "policy_file"),
    ("oslo_policy", "enforce_new_defaults"),
    ("cors", "allowed_origin"),
    ("cors", "allow_headers"),
    ("cors", "expose_headers"),
    ("cors", "max_age"),
]


def read(case_dir):
    conf = cfg.ConfigOpts()
    placement_conf.register_opts(conf)
    # [oslo_policy] in full, as Placement's policy Enforcer registers it.
    policy_opts._register(conf)
    conf.register_opts(auth_token_opts._OPTS, group="keystone_authtoken")
    ks_loading.register_auth_conf_options(conf, "keystone_authtoken")
    plugin_opts = ks_loading.get_auth_plugin_conf_options("password")
    for opt in plugin_opts:
        # keystoneauth requires them only once auth_type = password is read;
        # a case without Keystone is not refused for them.
        opt.required = False
    conf.register_opts(plugin_opts, group="keystone_authtoken")
    args = ["--config-file", os.path.join(case_dir, "placement.conf")]
    conf_d = os.path.join(case_dir, "placement.conf.d")
    if os.path.isdir(conf_d):
        args += ["--config-dir", conf_d]
    try:
        conf(args, project="placement", default_config_files=[], default_config_dirs=[])
        values = {}
        for group, name in READ:
            opts = conf if group == "DEFAULT" else conf[group]
            value = opts[name]
            where = conf.get_location(name, None if group == "DEFAULT" else group)
            if where is not None and where.location == cfg.Locations.user:
                values[f"{group}.{name}"] = value
        return {"values": values}
    except Exception as e:  # what the refusal says is oslo.config's, not ours
        # Without the clone's own path, so the record is the same anywhere.
        return {"refused": str(e).replace(os.path.abspath(case_dir) + "/", "")}


def main():
    root = sys.argv[1]
    cases = {
        name: read(os.path.join(root, name))
        for name in sorted(os.listdir(root))
        if os.path.isdir(os.path.join(root, name))
    }
    json.dump(cases, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
