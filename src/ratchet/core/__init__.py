"""Core records and protocols: tasks, tools, verdicts, trajectories, envs, agents, memory."""
