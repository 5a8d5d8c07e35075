#!/bin/bash
# Builds Debian 13's glslang (15.x, with GL_KHR_cooperative_matrix and
# GL_NV_cooperative_matrix2) into /opt/glslang, for the cooperative-matrix
# shaders that Debian 12's glslang 12 cannot compile. Optional: the project
# builds without it (those shaders are then left out). Use it with
#   meson setup build -Dglslang=/opt/glslang/bin/glslangValidator
set -euo pipefail
PREFIX="${1:-/opt/glslang}"
if [ -x "$PREFIX/bin/glslangValidator" ]; then echo "$PREFIX/bin/glslangValidator exists"; exit 0; fi
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
if ! grep -rqs 'trixie' /etc/apt/sources.list /etc/apt/sources.list.d/; then
  echo 'deb-src http://deb.debian.org/debian trixie main' | $SUDO tee /etc/apt/sources.list.d/trixie-src.list >/dev/null
fi
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq cmake dpkg-dev >/dev/null
work=$(mktemp -d)
cd "$work"
apt-get source -qq glslang/trixie >/dev/null 2>&1 || apt-get source -qq -t trixie glslang
src=$(find . -maxdepth 1 -type d -name 'glslang-*' | head -1)
# Debian's source mixes plain and keyword target_link_libraries when ENABLE_OPT=OFF.
sed -i 's/target_link_libraries(SPIRV INTERFACE glslang)/target_link_libraries(SPIRV glslang)/' "$src/SPIRV/CMakeLists.txt"
sed -i "s/if(\${SPIRV_TOOLS_FOUND} EQUAL 1)/if(ENABLE_OPT AND \${SPIRV_TOOLS_FOUND} EQUAL 1)/" "$src/CMakeLists.txt"
cmake -S "$src" -B build -DCMAKE_BUILD_TYPE=Release -DENABLE_OPT=OFF -DGLSLANG_TESTS=OFF \
  -DBUILD_SHARED_LIBS=OFF -DCMAKE_INSTALL_PREFIX="$PREFIX" >/dev/null
cmake --build build -j"$(nproc)" --target glslang-standalone >/dev/null
$SUDO install -D -m 0755 build/StandAlone/glslang "$PREFIX/bin/glslangValidator"
rm -rf "$work"
"$PREFIX/bin/glslangValidator" --version | head -2
