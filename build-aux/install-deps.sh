#!/bin/sh
# Installs the Debian 12 packages the build and tests need. Idempotent: does
# nothing (beyond a dpkg query) when everything is already present.
set -e
PKGS="meson ninja-build pkg-config gcc glslang-tools libvulkan-dev mesa-vulkan-drivers vulkan-tools
 libglib2.0-dev libjson-glib-dev libsoup-3.0-dev libsecret-1-dev gnome-keyring libgtk-4-dev libadwaita-1-dev
 zlib1g-dev libzstd-dev libsnappy-dev gettext desktop-file-utils appstream
 xvfb xauth dbus dbus-x11 libglib2.0-bin vulkan-validationlayers"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "installing:$missing"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
fi
