"""mlx_lm.server as a script, for `mlx.launch` (which runs files, not modules): bench/sharded.py
starts it on every rank of a ring; rank 0 serves HTTP, the others follow it."""

import sys

from mlx_lm.server import main

if __name__ == "__main__":
    sys.argv[0] = "mlx_lm.server"
    main()
