"""Only model replicas load a BLAS: importing the package, the ingress or the graph builder maps
no system OpenBLAS into the process and imports no MLX (checked in a fresh interpreter; numpy's
own renamed OpenBLAS copy does not count)."""

import json
import os
import subprocess
import sys

from deployments import blas

PROBE = """
import json, sys
import deployments, deployments.ingress.app, deployments.slots, graphs.config, graphs.omni
mapped = sorted({line.split()[-1] for line in open("/proc/self/maps") if "openblas" in line})
print(json.dumps({"mapped": mapped, "mlx": "mlx.core" in sys.modules}))
"""


def test_importing_the_ingress_and_the_graph_loads_no_blas_and_no_mlx():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    probe = json.loads(out.stdout.strip().splitlines()[-1])
    system = {os.path.realpath(path) for path in blas.candidates()}
    assert not system & set(probe["mapped"]) and probe["mlx"] is False


SLOT_PROBE = """
import json, sys
from deployments.slots import SLOTS
loaded = {}
for slot in SLOTS.values():
    slot.deployment_class()
    loaded[slot.name] = "mlx.core" in sys.modules
print(json.dumps(loaded))
"""


def test_importing_a_slot_deployment_imports_no_mlx():
    """A replica chooses its BLAS in __init__ (deployments/slot_replica.py), after Ray imported
    its deployment's module: a module that imports MLX would leave it the reference BLAS (the
    ASR slot did, through the diarization pipeline: Whisper ran ~6x slower)."""
    out = subprocess.run([sys.executable, "-c", SLOT_PROBE], capture_output=True, text=True, check=True)
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert loaded and not any(loaded.values()), loaded
