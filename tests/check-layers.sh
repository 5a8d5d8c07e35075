#!/bin/sh
# Fails on an include that runs back up the layer picture (docs/architecture.md):
#
#   base -> vk -> tensor -> formats tokenizer template data hub generate
#        -> recurrent -> transformer hierarchos -> encdec -> ssm -> train -> jobs -> app
#
# Each engine area may include only the areas listed for it below (its own
# files always). Also: no GTK or libadwaita in the engine, vulkan.h only in
# engine/vk/, the engine never includes app/ headers, and no engine area is
# above 10000 lines.
# Usage: check-layers.sh SOURCE_ROOT
set -eu
root=${1:-.}
cd "$root"

low="base vk tensor"
mid="formats tokenizer template data hub generate"

allowed () {
  case "$1" in
    base) echo "" ;;
    vk) echo "base" ;;
    tensor) echo "base vk" ;;
    formats | template | hub | generate) echo "$low" ;;
    tokenizer) echo "$low formats" ;; # a GGUF file's tokenizer.ggml.* metadata
    data) echo "$low formats tokenizer template" ;;
    recurrent) echo "$low $mid" ;; # the scans and the mixers that record them
    transformer | hierarchos) echo "$low $mid recurrent" ;;
    encdec) echo "$low $mid recurrent transformer" ;; # encoders and encoder-decoders on the registry
    ssm) echo "$low $mid recurrent transformer encdec" ;; # state-space decoders: the registry, encdec's loader
    train) echo "$low $mid recurrent transformer hierarchos encdec" ;;
    jobs) echo "$low $mid recurrent transformer hierarchos encdec ssm train" ;;
    *) echo "?" ;;
  esac
}

areas=$(cd engine && ls -d */ | tr -d /)
fail=0
for area in $areas; do
  ok=$(allowed "$area")
  if [ "$ok" = "?" ]; then
    echo "engine/$area/: not in the layer table of tests/check-layers.sh (add it there and to docs/architecture.md)"
    fail=1
    continue
  fi
  for f in $(find "engine/$area" -name '*.[ch]' | sort); do
    for inc in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([a-z0-9_-]*\)\/.*/\1/p' "$f" | sort -u); do
      [ "$inc" = "$area" ] && continue
      [ -d "engine/$inc" ] || continue # not an engine area (e.g. a generated header)
      case " $ok " in
        *" $inc "*) ;;
        *)
          echo "$f: includes $inc/ (engine/$area may include only: ${ok:-nothing outside base})"
          fail=1
          ;;
      esac
    done
  done
done

# a *-private.h is for the files of its own area: the app and the other areas use public headers
hits=$(grep -rn -E '#[[:space:]]*include[[:space:]]*"[a-z0-9_-]+/[a-z0-9_-]+-private\.h"' engine app |
  awk -F: '{ split ($1, p, "/"); match ($0, /"[a-z0-9_-]+\//); inc = substr ($0, RSTART + 1, RLENGTH - 2);
             if (p[1] != "engine" || p[2] != inc) print }' || true)
if [ -n "$hits" ]; then
  echo "private headers included outside their area (give them a public API instead):"
  echo "$hits"
  fail=1
fi

# the engine never includes GTK, libadwaita or the app
if grep -rn -E '#[[:space:]]*include[[:space:]]*[<"](gtk/|adwaita\.h|app/|gui/|cli/)' engine; then
  echo "engine/: GTK, libadwaita or app headers above"
  fail=1
fi
# vulkan.h only in engine/vk/ (hn-vk.h exposes opaque handles)
hits=$(grep -rln -E '#[[:space:]]*include[[:space:]]*<vulkan/' engine app | grep -v '^engine/vk/' || true)
if [ -n "$hits" ]; then
  echo "vulkan.h outside engine/vk/: $hits"
  fail=1
fi

# no area of the engine above 10k lines: a bigger one is a grab-bag to split by concern
for area in $areas; do
  n=$(find "engine/$area" -name '*.[ch]' -exec cat {} + | wc -l)
  if [ "$n" -gt 10000 ]; then
    echo "engine/$area/: $n lines of C (over 10000: split it by concern)"
    fail=1
  fi
done

[ "$fail" = 0 ] && echo "layers: ok ($(echo $areas | wc -w) engine areas)"
exit "$fail"
