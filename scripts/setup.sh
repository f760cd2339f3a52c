# Shared by scripts/run and scripts/test (sourced): check Debian packages, configure and build.
# Installs missing packages when run as root; otherwise prints the one apt-get line and exits 2.
set -euo pipefail
KVF_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KVF_PACKAGES=(cmake ninja-build g++ git libbenchmark-dev libgtest-dev libcli11-dev
              nlohmann-json3-dev libopenblas-dev libdnnl-dev gnuplot-nox
              libucx-dev ucx-utils openmpi-bin libopenmpi-dev iproute2)

kvf_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

kvf_install_deps() {
  local missing=()
  for p in "${KVF_PACKAGES[@]}"; do
    kvf_installed "$p" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -eq 0 ]; then
    echo "kvfrontier: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "kvfrontier: missing packages; run: sudo apt-get install -y ${missing[*]}" >&2
    exit 2
  fi
}

# Optional packages: installed when run as root and missing; without them the tests that need them skip and say why.
# chromium: the report.html check (tests/studies/report_chromium.sh).
kvf_install_optional() {
  local p
  for p in chromium; do
    kvf_installed "$p" && continue
    if [ "$(id -u)" -eq 0 ]; then
      echo "kvfrontier: installing optional $p" >&2
      export DEBIAN_FRONTEND=noninteractive
      { apt-get install -y -qq --no-install-recommends "$p" >/dev/null 2>&1 ||
        { apt-get update -qq && apt-get install -y -qq --no-install-recommends "$p" >/dev/null 2>&1; }; } ||
        echo "kvfrontier: optional $p not installed; the tests that need it will skip" >&2
    else
      echo "kvfrontier: optional $p missing (sudo apt-get install -y $p); the tests that need it will skip" >&2
    fi
  done
}

# kvf_build PRESET: configure (CUDA backend when nvcc is found) and build with every core.
kvf_build() {
  local preset=${1:-default}
  cd "$KVF_ROOT"
  # KVF_CUDA_ARCHS (e.g. 90, or 90-virtual for PTX only) builds one device architecture instead of sm_80/90/100
  # (CI, which has no GPU).
  # KVF_SANITIZED_TESTS_ELSEWHERE=ON (scripts/test under .ci/run only) leaves out the test binaries the sanitizer
  # phase ran whole; given on every configure, so a cached ON never carries over into a later scripts/test.
  cmake --preset "$preset" ${KVF_CUDA_ARCHS:+-DCMAKE_CUDA_ARCHITECTURES=$KVF_CUDA_ARCHS} \
    -DKVF_SANITIZED_TESTS_ELSEWHERE="${KVF_SANITIZED_TESTS_ELSEWHERE:-OFF}" >/dev/null
  cmake --build --preset "$preset" -j "$(nproc)"
}

# kvf_ctest ARGS: ctest with OpenMP's idle workers sleeping instead of spinning. ctest runs tests side by side
# (-j nproc), and libgomp's default spin of one test's idle workers takes the cores another test's threads need, so
# every barrier waits out a time slice: the access study's twin tests (ctest -R AttnTwin -j2, 2-core Zen 5 VM) took
# 50 s of wall time spinning and 13.6 s with passive waits. No test asserts a speed; a caller's own setting wins.
kvf_ctest() { OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}" ctest "$@"; }
