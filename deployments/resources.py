"""What one replica of a deployment reserves from Ray by default: a logical CPU share and
Ray's `memory` resource. docs/resources.md explains the numbers; serve_config.yaml repeats them
per deployment (it is what users edit, and it overrides these defaults).

No Ray, no MLX: the numbers are plain data.
"""

from __future__ import annotations

MiB = 2**20


def reserve(num_cpus: float, memory_mib: int) -> dict:
    """ray_actor_options for a replica that asks for `num_cpus` logical CPUs and `memory_mib` MiB."""
    return {"num_cpus": num_cpus, "memory": memory_mib * MiB}
