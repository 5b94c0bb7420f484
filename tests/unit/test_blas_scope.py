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
