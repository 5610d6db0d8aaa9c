"""The tests' port reservations: what one test process holds, another is never handed."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.ports import free_port, free_port_pair, free_port_run

HOLD = textwrap.dedent("""
    import sys, time
    from tests.ports import free_port, free_port_run
    print(free_port_run(3), free_port(), flush=True)
    sys.stdin.read()  # hold the reservations until the parent closes stdin
""")


def test_ports_reserved_by_another_process_are_not_handed_out():
    holder = subprocess.Popen([sys.executable, "-c", HOLD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        run, single = map(int, holder.stdout.readline().split())
        theirs = {run, run + 1, run + 2, single}
        pair, three, mine = free_port_pair(), free_port_run(3), free_port()
        ours = {pair, pair + 1, three, three + 1, three + 2, mine}
        assert len(ours) == 6  # nothing handed twice within this process either
        assert not ours & theirs
    finally:
        holder.stdin.close()
        holder.wait(timeout=10)


def test_single_ports_lie_below_the_kernels_ephemeral_range():
    # Linux picks outgoing connections' source ports from 32768 up (ip_local_port_range)
    assert free_port() < 32768
