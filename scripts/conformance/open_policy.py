#!/usr/bin/env python3
"""Prints the policy file Placement's OpenPolicyFixture stands for.

The fixture (placement/tests/functional/fixtures/gabbits.py) sets every
rule Placement registers, except the base rule admin_api, to "@" (anyone
authenticated). The rule names come from the installed openstack-placement
package itself, so the file follows the package's version.
"""

import json

from placement import policies


def main():
    print('# Every rule of the installed Placement but admin_api, opened to')
    print('# anyone authenticated: what OpenPolicyFixture sets.')
    for rule in policies.list_rules():
        if rule.name == 'admin_api':
            continue
        print('%s: "@"' % json.dumps(rule.name))


if __name__ == '__main__':
    main()
