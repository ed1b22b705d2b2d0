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

from ctmon.agent.core import Agent


def start_pending(socket_path: str, session_dir: str | None) -> Agent:
    agent = Agent(None)
    agent.hold_until_ranked(socket_path, session_dir)
    agent.channel.start()
    agent.watch_forks()
    return agent
