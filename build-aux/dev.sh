#!/bin/bash
# One entry point for a fresh Debian 12 machine:
#   build-aux/dev.sh run    install what is missing, build, open the app on the demo model
#   build-aux/dev.sh test   install what is missing, build, run the whole test suite
#   build-aux/dev.sh build  install what is missing and build
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-build}"
bash build-aux/install-deps.sh
BUILD="${HN_BUILD_DIR:-build}"
if [ -f "$BUILD/build.ninja" ]; then
  meson setup --reconfigure "$BUILD" >/dev/null
else
  meson setup "$BUILD"
fi
meson compile -C "$BUILD"
case "$mode" in
  build) ;;
  run)
    export XDG_DATA_DIRS="$PWD/$BUILD/data:${XDG_DATA_DIRS:-/usr/local/share:/usr/share}"
    export GSETTINGS_SCHEMA_DIR="$PWD/$BUILD/data"
    exec "$BUILD/app/gui/hierarchos-native" ;;
  test)
    # GUI tests need a display: run the whole suite under Xvfb and a session bus.
    xvfb-run -a -s "-screen 0 1400x1000x24" dbus-run-session -- \
      meson test -C "$BUILD" --print-errorlogs --num-processes 2
    # The template and JSON paths again under AddressSanitizer +
    # UndefinedBehaviorSanitizer (issue 20; about 2 minutes on 2 cores).
    # HN_SANITIZE=1 runs every CPU-only engine test that way instead.
    if [ -n "${HN_SANITIZE:-}" ]; then
      bash build-aux/sanitize.sh "$BUILD-asan"
    else
      HN_SANITIZE_TESTS="chat-template hostile config safetensors fuzz-chat-template fuzz-model-config fuzz-safetensors fuzz-tokenizer-json fuzz-dataset" \
        bash build-aux/sanitize.sh "$BUILD-asan"
    fi ;;
  *) echo "usage: $0 run|test|build" >&2; exit 2 ;;
esac
