#!/bin/bash
# Builds the engine and the CPU-only engine tests with AddressSanitizer +
# UndefinedBehaviorSanitizer (leak checking on) into BUILD_DIR (default
# build-asan) and runs them: I/O parsers, tokenizers, datasets, job specs,
# optimizers, Hierarchos CPU model, fuzz-corpus replays, faults, secrets.
#   build-aux/sanitize.sh [BUILD_DIR]
#   HN_SANITIZE_TESTS="chat-template hostile" build-aux/sanitize.sh   (a subset)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build-asan}"
if [ ! -f "$BUILD/build.ninja" ]; then
  CFLAGS="-fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
    meson setup "$BUILD" -Db_sanitize=address,undefined -Db_lundef=false -Dgui=disabled >/dev/null
fi
tests=(safetensors config hostile job-spec chat-template tokenizer tokenizer-components dataset parquet hub train-optim
       hierarchos hierarchos-jobs secrets)
fuzz=$(sed -n "/^fuzz_targets = \\[/,/^\\]/p" tests/fuzz/meson.build | grep -o "'[a-z0-9-]*'" | tr -d "'")
for t in $fuzz; do tests+=("fuzz-$t"); done
# HN_SANITIZE_TESTS="chat-template hostile fuzz-chat-template ...": only those
# (the template and JSON paths build and run in a few minutes).
if [ -n "${HN_SANITIZE_TESTS:-}" ]; then
  read -r -a tests <<< "$HN_SANITIZE_TESTS"
fi
targets=(app/cli/hierarchos-native-cli)
for t in "${tests[@]}"; do
  case "$t" in
    fuzz-*) targets+=("tests/fuzz/fuzz-replay-${t#fuzz-}") ;;
    *) targets+=("tests/engine/test-$t") ;;
  esac
done
ninja -C "$BUILD" "${targets[@]}"
# Leaks are errors; GLib's type system and caches live until exit by design.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:fast_unwind_on_malloc=0"
export LSAN_OPTIONS="suppressions=$PWD/build-aux/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# Sanitized code runs several times slower: give every test more time.
meson test -C "$BUILD" --no-rebuild --print-errorlogs --num-processes 2 --timeout-multiplier 5 "${tests[@]}"
