#!/usr/bin/env bash
# The GPU check: the LLM engine beside mlx-lm's BatchGenerator (`python -m bench.engine`) and
# beside transformers' generate() (`python -m bench.transformers_peer`), on MLX's CUDA build, on
# an NVIDIA machine that has no network and gets files only through the working tree (at most
# 64 MiB a command) and gives back at most 8 files from $OUT. CI never needs it; its procedure
# and results: docs/performance.md, "The GPU check".
#
#   bench/device_check.sh stage         here: download the wheels, build the two parts under
#                                       .device-stage/ (git-ignored), check each command's size
#   bench/device_check.sh local-check   here: the parts unpacked and installed as `run` does, into
#                                       scratch folders: mlx's files where it expects them (the
#                                       CUDA build cannot load without a GPU); then the carried
#                                       wheels beside the GPU machine's package versions, with
#                                       MLX's CPU files, run `bench.engine` at smoke size
#   bench/device_check.sh receive       there, command 1 (carry .device-stage/part1): part 1 into /tmp
#   bench/device_check.sh run           there, command 2, right after (carry .device-stage/part2):
#                                       install, run both scenarios, JSON and logs into $OUT
#
# MLX's CUDA wheel (~90 MB) travels as a tar.xz of its extracted files (~75 MB) cut in two: part
# 1 alone in the first command, part 2 with the other wheels in the second. `run` pip-installs
# the wheels (the `mlx` binding first among them) into a folder of their own and unpacks the
# tar beside them: the CUDA build's files (mlx/lib/libmlx.so, ...) land in the binding's
# package, as pip would put them. libmlx.so finds cuBLAS, cuDNN, NCCL, NVRTC and cuFFT through
# its RPATH ($ORIGIN/../../nvidia/...): the machine's own NVIDIA wheels (its PyTorch's) are
# linked there. Everything else the scenarios import is the machine's (numpy, transformers,
# torch, tokenizers, jinja2, ...; their versions are in its package list).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
STAGE=${STAGE:-$ROOT/.device-stage}
PY=${PYTHON:-$ROOT/.venv/bin/python}
BUILD=${BUILD:-cuda13} # the H200 machines run driver 580 (CUDA 13.0): mlx-cuda-13
TARGET_PY=${TARGET_PY:-3.12}
LIMIT=$((64 * 1024 * 1024)) # what one command's working tree may carry
MARGIN=$((1024 * 1024))     # room for files the tree gains meanwhile
# What the GPU machine's image lacks, pinned to this checkout's environment (`stage` reads the
# versions): MLX's binding, mlx-lm, pydantic and what it needs, llguidance (the grammar masks).
CARRIED="mlx-lm pydantic pydantic-core annotated-types typing-inspection typing-extensions llguidance"
# Platforms pip accepts for the GPU machine (x86-64, glibc 2.35+); pip matches N exactly.
PLATFORMS=$(for n in 35 34 31 28 27 24 17; do printf -- '--platform manylinux_2_%s_x86_64 ' "$n"; done)
PLATFORMS="$PLATFORMS --platform manylinux2014_x86_64"
TMP_STAGE=/tmp/ominix-device-stage
SITE=/tmp/ominix-site

say() { echo "[device_check $(date +%H:%M:%S)] $*"; }

version_of() { "$PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$1"; }

package_of() { case "$1" in cuda12) echo mlx-cuda-12 ;; cuda13) echo mlx-cuda-13 ;; *) echo "unknown BUILD $1" >&2 && exit 2 ;; esac; }

tree_bytes() {
	# What a command sends besides its carry: tracked files and untracked ones git does not ignore.
	(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
}

stage() {
	local mlx package download tree part1_max total part1 part2
	mlx=$(version_of mlx)
	package=$(package_of "$BUILD")
	download="$STAGE/download"
	rm -rf "$STAGE/part1" "$STAGE/part2" "$STAGE/tree"
	mkdir -p "$download" "$STAGE/part1" "$STAGE/part2/wheels" "$STAGE/tree"
	local pins=("mlx==$mlx" "$package==$mlx")
	for name in $CARRIED; do pins+=("$name==$(version_of "$name")"); done
	say "downloading ${pins[*]} (cp${TARGET_PY/./}, manylinux x86-64)"
	# shellcheck disable=SC2086
	"$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version "$TARGET_PY" --implementation cp \
		$PLATFORMS -d "$download" "${pins[@]}"
	local wheel
	wheel=$(ls "$download"/"${package//-/_}"-"$mlx"-*.whl)
	(cd "$STAGE/tree" && unzip -q "$wheel")
	say "packing $(du -sh "$STAGE/tree" | cut -f1) of $package's files (xz -9: a few minutes)"
	tar -C "$STAGE/tree" -cf - . | xz -T0 -9 >"$STAGE/mlx-cuda.tar.xz"
	rm -rf "$STAGE/tree"
	for name in "${pins[@]}"; do
		[ "${name%%==*}" = "$package" ] && continue
		cp "$download"/"$(echo "${name%%==*}" | tr - _)"-"${name##*==}"-*.whl "$STAGE/part2/wheels/"
	done
	tree=$(tree_bytes)
	total=$(stat -c %s "$STAGE/mlx-cuda.tar.xz")
	part1_max=$((LIMIT - tree - MARGIN))
	part1=$((total < part1_max ? total : part1_max))
	head -c "$part1" "$STAGE/mlx-cuda.tar.xz" >"$STAGE/part1/mlx-cuda.tar.xz.1"
	tail -c +"$((part1 + 1))" "$STAGE/mlx-cuda.tar.xz" >"$STAGE/part2/mlx-cuda.tar.xz.2"
	(cd "$STAGE" && sha256sum mlx-cuda.tar.xz | sed 's/ .*//' >part2/mlx-cuda.sha256)
	echo "$package $mlx" >"$STAGE/part2/build"
	rm "$STAGE/mlx-cuda.tar.xz"
	part1=$(du -sb "$STAGE/part1" | cut -f1)
	part2=$(du -sb "$STAGE/part2" | cut -f1)
	say "the working tree: $tree bytes; command 1 carries $part1 more, command 2 $part2 more (limit $LIMIT each)"
	if [ $((tree + part1)) -gt "$LIMIT" ] || [ $((tree + part2)) -gt "$LIMIT" ]; then
		say "a command would carry more than 64 MiB: leave fewer files in the tree or carry less"
		exit 1
	fi
	say "staged. Then, on the GPU machine, one right after the other (it goes back after 30 s idle):"
	say "  1: carry [.device-stage/part1]  command: bench/device_check.sh receive"
	say "  2: carry [.device-stage/part2]  command: bench/device_check.sh run   (timeout_s 540)"
}

receive() {
	mkdir -p "$TMP_STAGE"
	cp "$ROOT/.device-stage/part1/mlx-cuda.tar.xz.1" "$TMP_STAGE/"
	say "part 1 in $TMP_STAGE ($(stat -c %s "$TMP_STAGE/mlx-cuda.tar.xz.1") bytes); now the second command: bench/device_check.sh run"
}

# pip-install the carried wheels into $1, then unpack the CUDA build's files beside the binding.
install_into() {
	local site=$1 python=$2 part1=$3
	local part2="$ROOT/.device-stage/part2"
	rm -rf "$site" && mkdir -p "$site"
	"$python" -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$part2"/wheels/*.whl
	local sum
	sum=$(cat "$part1" "$part2/mlx-cuda.tar.xz.2" | sha256sum | sed 's/ .*//')
	if [ "$sum" != "$(cat "$part2/mlx-cuda.sha256")" ]; then
		say "the two parts do not make the staged tar (sha256 $sum): stage and send them again"
		return 1
	fi
	cat "$part1" "$part2/mlx-cuda.tar.xz.2" | xz -d | tar -C "$site" -xf -
}

# The machine's NVIDIA wheels (nvidia/cublas/lib, nvidia/cu13/lib, ...) where libmlx.so's RPATH
# looks ($site/nvidia), one link per library folder, from every folder of the namespace.
link_nvidia() {
	local site=$1 python=$2 dir sub
	mkdir -p "$site/nvidia"
	for dir in $("$python" -c 'import nvidia; print("\n".join(nvidia.__path__))' 2>/dev/null); do
		for sub in "$dir"/*/; do
			[ -e "$site/nvidia/$(basename "$sub")" ] || ln -s "$sub" "$site/nvidia/$(basename "$sub")"
		done
	done
	ls "$site/nvidia"
}

run() {
	local out=${OUT:?run writes its results to \$OUT (the device tool sets it)}
	local python=${DEVICE_PYTHON:-python3}
	local log="$out/device_check.log"
	exec > >(tee -a "$log") 2>&1
	say "on $(hostname): $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo 'no nvidia-smi')"
	if [ ! -f "$TMP_STAGE/mlx-cuda.tar.xz.1" ]; then
		say "no part 1 in $TMP_STAGE: run 'bench/device_check.sh receive' with .device-stage/part1 carried, on this warm machine, first"
		exit 1
	fi
	local t0=$SECONDS
	install_into "$SITE" "$python" "$TMP_STAGE/mlx-cuda.tar.xz.1"
	link_nvidia "$SITE" "$python"
	export PYTHONPATH="$SITE:$ROOT" PYTHONUNBUFFERED=1
	# MLX compiles kernels with NVRTC at first use, with the CUDA headers of $CUDA_HOME (default
	# /usr/local/cuda, the toolkit's) and its own CCCL (mlx/include/cccl, in the tar); without a
	# toolkit, the headers of NVIDIA's CUDA runtime wheel do.
	if [ -z "${CUDA_HOME:-}" ] && [ ! -d /usr/local/cuda ]; then
		for dir in "$SITE"/nvidia/cu13 "$SITE"/nvidia/cuda_runtime; do
			[ -f "$dir/include/cuda_fp16.h" ] && export CUDA_HOME=$dir && break
		done
	fi
	say "CUDA headers: ${CUDA_HOME:-/usr/local/cuda}"
	say "installed $(cat "$ROOT/.device-stage/part2/build") in $((SECONDS - t0)) s"
	cd "$ROOT"
	"$python" -m deployments.accelerator show || true
	local steps=() rc
	step() { # name, seconds, command...: runs it, notes its status, never stops the check
		local name=$1 limit=$2 started=$SECONDS
		shift 2
		say "$name"
		set +e
		timeout "$limit" "$@"
		rc=$?
		set -e
		steps+=("\"$name\": {\"rc\": $rc, \"seconds\": $((SECONDS - started))}")
		say "$name: rc $rc in $((SECONDS - started)) s"
	}
	step device 120 "$python" -c '
import json, sys
import mlx.core as mx
from deployments import accelerator
b = accelerator.runtime()
a = mx.ones((4096, 4096), dtype=mx.bfloat16)
mx.eval(a @ a)
json.dump({**b.as_dict(), "mlx": mx.__version__, "device_info": {k: str(v) for k, v in mx.device_info().items()}}, open(sys.argv[1], "w"))
print(b)' /tmp/ominix-device.json
	step engine 330 "$python" -m bench.engine --streams 1,16,64 --tokens 128 --repeats 3 --out "$out/engine" --cache-dir /tmp/ominix-cache
	step transformers 150 "$python" -m bench.transformers_peer --streams 1,16,64 --tokens 128 --repeats 3 --out "$out" --cache-dir /tmp/ominix-cache
	local IFS=, device
	device=$(cat /tmp/ominix-device.json 2>/dev/null || echo null)
	echo "{\"build\": \"$(cat "$ROOT/.device-stage/part2/build")\", \"device\": $device, \"seconds\": $((SECONDS - t0)), ${steps[*]}}" >"$out/device_check.json"
	# At most 8 files come back from $OUT: past that, all but the summary and the log in one archive.
	if [ "$(find "$out" -type f | wc -l)" -gt 8 ]; then
		(cd "$out" && find . -type f ! -name device_check.json ! -name device_check.log | tar -czf /tmp/ominix-results.tar.gz -T - &&
			find . -mindepth 1 ! -name device_check.json ! -name device_check.log -delete && mv /tmp/ominix-results.tar.gz .)
	fi
	say "done in $((SECONDS - t0)) s: $out/device_check.json"
}

# Here, no GPU: install the parts as `run` does; show mlx's files where the binding loads them
# (the CUDA build then stops at the missing driver, as expected); then the carried wheels
# beside the GPU machine's package versions (KINDS.md), with MLX's CPU build's files in place of
# the CUDA build's, run bench.engine at smoke size: the set of wheels is enough.
local_check() {
	local scratch="$STAGE/scratch" venv="$STAGE/scratch/venv" mlx
	mlx=$(version_of mlx)
	mkdir -p "$scratch"
	[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
	say "a scratch venv like the GPU machine's image: its versions of what the scenarios import"
	"$venv/bin/python" -m pip install --quiet numpy "transformers==5.17.0" "huggingface_hub==1.33.0" \
		"tokenizers==0.23.2" "safetensors==0.8.0" "sentencepiece==0.2.2" jinja2 pyyaml protobuf pillow
	# This machine's Python: the binding and pydantic-core built for it (the staged ones are cp312).
	local host_py
	host_py=$("$venv/bin/python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
	"$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version "$host_py" --implementation cp \
		$PLATFORMS -d "$scratch/host" "mlx==$mlx" "pydantic-core==$(version_of pydantic-core)" "mlx-cpu==$mlx"
	local site="$scratch/site"
	local saved="$STAGE/part2/wheels.cp312"
	rm -rf "$saved" && mkdir -p "$saved"
	mv "$STAGE"/part2/wheels/mlx-*.whl "$STAGE"/part2/wheels/pydantic_core-*.whl "$saved/"
	cp "$scratch"/host/mlx-"$mlx"-*.whl "$scratch"/host/pydantic_core-*.whl "$STAGE/part2/wheels/"
	install_into "$site" "$venv/bin/python" "$STAGE/part1/mlx-cuda.tar.xz.1" || true
	rm "$STAGE"/part2/wheels/mlx-*.whl "$STAGE"/part2/wheels/pydantic_core-*.whl
	mv "$saved"/*.whl "$STAGE/part2/wheels/" && rmdir "$saved"
	say "the CUDA build's files beside the binding:"
	ls -la "$site/mlx/lib" "$site"/mlx_cuda_1*.libs | sed 's/^/    /'
	say "the binding loads $site/mlx/lib/libmlx.so (RUNPATH \$ORIGIN/lib); what it lacks here is the NVIDIA driver and libraries:"
	ldd "$site"/mlx/core.*.so | grep -E "libmlx|not found" | sed 's/^/    /'
	set +e
	PYTHONPATH="$site" "$venv/bin/python" -c 'import mlx.core' 2>&1 | tail -1 | sed 's/^/    import mlx.core: /'
	set -e
	say "the same wheels with MLX's CPU build's files in place of the CUDA build's: bench.engine at smoke size"
	rm -rf "$site"/mlx/lib "$site"/mlx/include "$site"/mlx/share "$site"/mlx_cuda_1*
	(cd "$site" && unzip -q -o "$scratch"/host/mlx_cpu-"$mlx"-*.whl)
	(cd "$ROOT" && PYTHONPATH="$site:$ROOT" "$venv/bin/python" -m bench.engine --streams 1,2 --tokens 8 --repeats 1 \
		--out "$scratch/engine" --cache-dir "$scratch/cache" | tail -12)
}

case "${1:-}" in
stage) stage ;;
receive) receive ;;
run) run ;;
local-check) local_check ;;
*)
	echo "usage: bench/device_check.sh stage|local-check|receive|run" >&2
	exit 2
	;;
esac
