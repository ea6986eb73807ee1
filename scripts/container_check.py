#!/usr/bin/env python3
"""Runs the Dockerfile's build stage on exactly the files it copies.

There is no container engine here, so this does what the build stage does
without one: every `COPY` of the first stage (from the build context) is
copied into an empty folder standing for its WORKDIR, and every `RUN` of
that stage is run there with bash. What the RUN's `--mount=type=cache`
options provide is provided the same way: the cargo target folder is this
checkout's own `target/` (so dependencies are not compiled again), and
absolute paths the command writes to (`/usr/local/bin`) are redirected into
the scratch folder. A file the code needs and the Dockerfile forgets to
copy fails the build here as it would in `docker build`.

  scripts/container_check.py [--keep]

Exit status: 0 when the stage built, 1 when it failed, 2 when the
Dockerfile has a form this check does not understand.
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def instructions(text):
    """The Dockerfile's instructions: (KEYWORD, arguments), continuation
    lines joined, comments dropped."""
    out, current = [], ''
    for line in text.splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith('#')):
            continue
        if stripped.startswith('#'):
            continue
        if stripped.endswith('\\'):
            current += stripped[:-1] + ' '
            continue
        current += stripped
        keyword, _, args = current.partition(' ')
        out.append((keyword.upper(), args.strip()))
        current = ''
    return out


def build_stage(steps):
    """The instructions of the first stage (up to the second FROM)."""
    stage, froms = [], 0
    for keyword, args in steps:
        if keyword == 'FROM':
            froms += 1
            if froms == 2:
                break
            continue
        stage.append((keyword, args))
    return stage


def fail(message, status=1):
    print('container check: ' + message, file=sys.stderr)
    sys.exit(status)


def main():
    keep = '--keep' in sys.argv[1:]
    with open(os.path.join(ROOT, 'Dockerfile')) as f:
        stage = build_stage(instructions(f.read()))
    scratch = tempfile.mkdtemp(prefix='container-check.')
    try:
        workdir = '/'
        copied = []
        for keyword, args in stage:
            if keyword == 'WORKDIR':
                workdir = args
            elif keyword == 'COPY':
                words = shlex.split(args)
                if any(w.startswith('--') for w in words):
                    fail('COPY with options is not understood: %s' % args, 2)
                *sources, dest = words
                here = os.path.join(scratch, 'root' + workdir)
                target = os.path.normpath(os.path.join(here, dest))
                for source in sources:
                    path = os.path.join(ROOT, source)
                    if not os.path.exists(path):
                        fail('COPY %s: not in the repository' % source)
                    into = (os.path.join(target, os.path.basename(source))
                            if dest.endswith('/') else target)
                    os.makedirs(os.path.dirname(into), exist_ok=True)
                    if os.path.isdir(path):
                        shutil.copytree(path, into, dirs_exist_ok=True)
                    else:
                        shutil.copy2(path, into)
                    copied.append(source)
            elif keyword == 'RUN':
                # The cache mounts: the registry is the machine's own, the
                # target folder this checkout's (prebuilt dependencies).
                command = re.sub(r'--mount=\S+\s*', '', args)
                redirected = os.path.join(scratch, 'usr-local-bin')
                os.makedirs(redirected, exist_ok=True)
                command = command.replace('/usr/local/bin', redirected)
                here = os.path.join(scratch, 'root' + workdir)
                os.makedirs(here, exist_ok=True)
                target = os.path.join(here, 'target')
                if not os.path.exists(target):
                    os.makedirs(os.path.join(ROOT, 'target'), exist_ok=True)
                    os.symlink(os.path.join(ROOT, 'target'), target)
                print('container check: copied %s; running: %s'
                      % (' '.join(copied), command), flush=True)
                # Cargo is told the target's real path: build scripts
                # write absolute paths of their output, which must outlive
                # this scratch folder's link.
                env = dict(os.environ,
                           CARGO_TARGET_DIR=os.path.realpath(os.path.join(ROOT, 'target')))
                run = subprocess.run(['bash', '-euo', 'pipefail', '-c', command],
                                     cwd=here, env=env)
                if run.returncode != 0:
                    fail('the build stage failed (exit %d) on exactly the '
                         'files the Dockerfile copies' % run.returncode)
            elif keyword in ('ENV', 'ARG', 'LABEL'):
                continue
            else:
                fail('%s in the build stage is not understood' % keyword, 2)
        print('container check: the build stage built')
    finally:
        if keep:
            print('container check: kept %s' % scratch)
        else:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == '__main__':
    main()
