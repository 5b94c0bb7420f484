"""`python -m graphs.serve [serve run options]`: `serve run serve_config.yaml` with OminiX-API's
environment names applied to Ray Serve's HTTP options, which Ray reads before any graph code runs
(PORT, OMINIX_API_HOST, OMINIX_TLS_CERT + OMINIX_TLS_KEY: the `http_options.` rows of the table
in deployments/env.py, under its one rule).

The config file is not modified; a patched copy is passed to `serve run`. It also starts Ray
with the settings in RAY_ENV_DEFAULTS unless the environment sets them.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

import yaml

from deployments.env import ConfigError, overrides

# Ray starts every worker process (the proxy, every replica) at nice 15, so that on a shared
# machine anything outside Ray wins the CPU over the model replicas: an HTTP client on the same
# box made decoding 8% slower in the benchmark. A model server's replicas are the work.
#
# Not set here, though measured: Serve's user code and handle routers on each replica's main
# loop (RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD=0, RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP=0)
# cut the graph's CPU per streamed token by about a fifth on a cheap model (docs/performance.md,
# "Serving overhead"), but the one full e2e run with them failed the realtime agent's check that
# nothing runs on after a barge-in and a closed socket, while the same test passes alone: a race
# the settings expose. Off until it is found; exporting them before `make serve` turns them on.
RAY_ENV_DEFAULTS = {"RAY_worker_niceness": "0"}

# Token authentication (a token in ~/.ray/auth_token, generated on first start) keeps other
# local users off the cluster: Ray 2.60 turns it on for a new local cluster when RAY_AUTH_MODE
# is unset; `make serve` says so explicitly rather than resting on that default (docs/operating.md).
# Only for a process that starts with it: Ray reads RAY_AUTH_MODE once, when it loads, so a
# process that set it after importing ray would start a token cluster it cannot talk to.
SERVE_ENV_DEFAULTS = {**RAY_ENV_DEFAULTS, "RAY_AUTH_MODE": "token"}


def ray_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment `serve run` is started with: SERVE_ENV_DEFAULTS under what the caller set."""
    return {**SERVE_ENV_DEFAULTS, **environ}


def apply_env(config: dict, environ: Mapping[str, str]) -> dict:
    try:
        targets = overrides(environ, http=True)
    except ConfigError as e:
        raise SystemExit(str(e)) from None
    http = {**dict(config.get("http_options") or {}), **{option: value for option, (_, value) in targets.items()}}
    for option in ("ssl_certfile", "ssl_keyfile"):
        if http.get(option):
            http[option] = os.path.expanduser(http[option])
    if bool(http.get("ssl_certfile")) != bool(http.get("ssl_keyfile")):
        raise SystemExit("TLS needs both a certificate and a key (OMINIX_TLS_CERT and OMINIX_TLS_KEY)")
    return {**config, "http_options": http}


def preflight(config: dict, environ: Mapping[str, str]) -> None:
    """Fail here, before Ray starts, on what would only show as DEPLOY_FAILED in `serve status`
    under a bare `serve run`: invalid graph args and an unmet app manifest."""
    from graphs.config import GraphArgs
    from graphs.manifest import ManifestError
    from graphs.omni import check_app_manifest

    for app in config.get("applications", []):
        if app.get("import_path") != "graphs.omni:build_app":
            continue
        try:
            check_app_manifest(GraphArgs.from_args(app.get("args"), environ))
        except (ManifestError, ValueError) as e:
            raise SystemExit(f"ominix-serve cannot start application '{app.get('name')}':\n{e}") from None


def main(argv: list[str]) -> None:
    config_path = Path(os.environ.get("OMINIX_SERVE_CONFIG", "serve_config.yaml"))
    config = apply_env(yaml.safe_load(config_path.read_text()), os.environ)
    preflight(config, os.environ)
    patched = Path(tempfile.mkdtemp(prefix="ominix-")) / config_path.name
    patched.write_text(yaml.safe_dump(config, sort_keys=False))
    serve_cli = Path(sys.executable).parent / "serve"
    os.execve(str(serve_cli), [str(serve_cli), "run", *argv, str(patched)], ray_env(os.environ))


if __name__ == "__main__":
    main(sys.argv[1:])
