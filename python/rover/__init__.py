"""Rover's worker-side package.

A training script started by ``rover run`` can ``import rover`` with nothing
installed: the agent puts this package on the workers' PYTHONPATH. It needs
only the standard library (torch is imported lazily by the parts that use it)
and talks to the local node agent over the unix socket named by
``ROVER_AGENT_SOCKET``, never to the job master.

    import rover
    info = rover.agent_info()      # {"nodeRank": 0, "round": 1, ...}
"""

from . import data, progress
from ._agent import AgentError, agent_info, under_rover

__all__ = ["AgentError", "agent_info", "data", "progress", "under_rover"]
__version__ = "0.1.0"
