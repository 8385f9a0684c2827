#!/usr/bin/env bash
# Installs the pinned nvcc 13.0 (with CUB/CCCL and cudart_static) from the NVIDIA Python
# packages into a cache folder, once, and exports CUDA_HOME. Source it:
#   source .ci/install-cuda.sh
# No system CUDA toolkit and no GPU are needed. Pinned to 13.0: drivers of the 580 series run
# it, and newer PTX would not JIT there.
cache=${JOINKIT_CUDA_CACHE:-$HOME/.cache/joinkit/cuda-13.0}
if [[ ! -x $cache/nvidia/cu13/bin/nvcc || ! -f $cache/nvidia/cu13/lib/libcudart_static.a ]]; then
  echo "installing nvcc 13.0 into $cache" >&2
  python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
    --target "$cache" \
    'nvidia-cuda-nvcc==13.0.*' 'nvidia-cuda-runtime==13.0.*' 'nvidia-cuda-cccl==13.0.*' \
    'nvidia-cuda-crt==13.0.*' 'nvidia-nvvm==13.0.*'
fi
export CUDA_HOME=$cache/nvidia/cu13
"$CUDA_HOME/bin/nvcc" --version | tail -n 2 >&2
