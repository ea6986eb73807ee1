"""`placement upgrade check` and placement-status's `upgrade check` on the
same database: every check placement-status prints is printed by ours,
first, in its order, cell for cell; ours adds only checks of its own that
succeed here; both exit with the same code.

    python3 upgrade_check_agrees.py LABEL EXPECTED_RC -- PLACEMENT_STATUS... -- OURS...
"""
import subprocess
import sys


def cells(table):
    """The table's cells, each its lines stripped of the frame."""
    out, cur = [], []
    for line in table.splitlines():
        if line.startswith("+"):
            if cur:
                out.append("\n".join(cur))
            cur = []
        elif line.startswith("|"):
            cur.append(line[1:-1].strip())
    return out[1:]  # the title


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def main():
    label, expected = sys.argv[1], int(sys.argv[2])
    rest = sys.argv[3:]
    cut = [i for i, a in enumerate(rest) if a == "--"]
    theirs_cmd, ours_cmd = rest[cut[0] + 1:cut[1]], rest[cut[1] + 1:]
    trc, tout, terr = run(theirs_cmd)
    orc, oout, oerr = run(ours_cmd)
    theirs, ours = cells(tout), cells(oout)
    problems = []
    if trc != expected:
        problems.append(f"placement-status exited {trc}, the test expects {expected}: {terr[-400:]}")
    if orc != trc:
        problems.append(f"ours exited {orc}, placement-status {trc}: {oerr[-400:]}")
    if ours[:len(theirs)] != theirs:
        problems.append("the checks differ:\n--- placement-status\n" + tout + "\n--- ours\n" + oout)
    for extra in ours[len(theirs):]:
        if "Result: Success" not in extra:
            problems.append("a check of our own fires on Placement's data:\n" + extra)
    if not theirs:
        problems.append("placement-status printed no checks:\n" + tout + terr)
    if problems:
        print(f"FAILED ({label}):", *problems, sep="\n", file=sys.stderr)
        sys.exit(1)
    print(f"   {label}: both exit {orc}; {len(theirs)} checks alike, {len(ours) - len(theirs)} of ours beside them")


main()
