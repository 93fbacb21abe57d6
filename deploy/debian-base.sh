#!/bin/sh
# A Debian base image for deploy/Dockerfile, built from Debian's own package archive, for hosts that
# reach Debian's mirrors but not Docker Hub:
#
#   deploy/debian-base.sh [TAG]          # default detok-base:bookworm; needs root and debootstrap
#   make image BASE_IMAGE=detok-base:bookworm
#
# EXTRA_CA_DIR=DIR adds DIR's *.crt to the image's trust store: a network whose TLS goes through an
# inspecting proxy (the build's pip then reaches PyPI through it, as the host does).
#
# bookworm's python3 is 3.11. The image holds python3, python3-venv and CA certificates; the build
# stage adds the compiler and python3-dev (BUILD_PACKAGES, set by `make image` for this base).
set -eu
tag=${1:-detok-base:bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$root" "$mirror"
if [ -n "${EXTRA_CA_DIR:-}" ]; then
    cp "$EXTRA_CA_DIR"/*.crt "$root"/usr/local/share/ca-certificates/
    chroot "$root" update-ca-certificates
fi
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | docker import - "$tag"
echo "$tag"
