"""A pending agent: for a child of the job that may become a rank.

``mp.spawn`` / ``start_processes`` children and the processes a
Lightning-style launcher re-executes the script in carry no RANK in their
environment: they learn their rank when they call ``init_process_group``.
Spawned DataLoader workers look just the same at start-up and never do.

So such a process (once it imports torch: ctmon/agent/site) gets the whole
agent, hooks and all, with its channel on hold: records are kept, nothing is
sent and no connection is made. The sender thread, as it wakes, looks whether
the process group is up; the moment it is, the agent connects, says hello as
that rank and sends everything it kept -- so a compile that started before
the rank was known is still counted. A process that never initialises a
group exits without having sent a byte.
"""

from __future__ import annotations

import os

from ctmon import _api
from ctmon.agent.channel import connect
from ctmon.agent.core import Agent
from ctmon.agent.rank_info import initialised_rank
from ctmon.wire import protocol


def start_pending(socket_path: str, session_dir: str | None) -> Agent:
    agent = Agent(None)
    ch = agent.channel

    def hold() -> bool:
        rank = initialised_rank()
        if rank is None:
            return True
        ch.hold = None
        sock = connect(socket_path)
        if sock is None:  # the monitor is gone: stay quiet for good
            ch.disabled = True
            ch.records.clear()
            return True
        ch._sock = sock
        ch.rank = rank.rank
        hello = agent.hello(session_dir, rank, later=True)
        hello["rank"] = rank.rank
        ch._send(protocol.encode(hello))
        _api._step_impl = agent.clock.api_step
        return False

    ch.hold = hold
    ch.start()
    os.register_at_fork(after_in_child=agent.after_fork_in_child)
    return agent
